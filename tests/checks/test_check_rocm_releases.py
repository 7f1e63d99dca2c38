"""vLLM on AMD GPUs for releases before 0.11 and after 0.18 (issue 13): the gfx targets each
release's ROCm image is built for, the Triton kernels its attention needs, FP8 GEMMs per gfx
target, the V0 engine's ROCM_FLASH selection, and AITER's MXFP4 batched matmul in 0.16.

Each fact has a launch that fails and a neighbour that does not (another GPU, release or switch).
Sources are in engines/vllm/knowledge/rocm.yaml.
"""

from __future__ import annotations

import json

import pytest
from checkfixtures import MLA_TEXT, _index, _write, codes, finding, llama_like

from servepilot.checks import run_checks
from servepilot.checks.result import engine_stage
from servepilot.deployment import build_deployment

FP8 = {"quant_method": "fp8", "activation_scheme": "static"}


def _check(path, gpu: str, version: str, *flags: str, env: dict | None = None):
    prefix = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
    dep = build_deployment(command=[*prefix, "vllm", "serve", str(path), *flags], gpu=gpu,
                           engine_version=version, probe=False)
    return run_checks(dep)


def _facts(result) -> list[str]:
    return [u.fact for u in result.unknowns]


def _small(tmp_path, **kw):
    return llama_like(tmp_path / "m", heads=8, kv_heads=8, max_pos=4096, **kw)


# --- Triton's AMD targets: GCN5 (gfx906) has no ISA family -----------------------------------

@pytest.mark.parametrize("gpu, version, refused", [
    ("mi60", "0.5.4", True),     # V0 ROCM_FLASH, Triton flash attention by default
    ("mi50-32gb", "0.6.3", True),
    ("mi60", "0.16.0", True),    # V1 only: every ROCm backend is Triton off gfx9
    ("mi100", "0.5.4", False),   # gfx908 is CDNA1: Triton compiles for it
    ("mi210", "0.16.0", False),  # gfx90a, CDNA2
    ("rx-7900-xtx", "0.6.3", False),  # gfx1100, RDNA3
])
def test_triton_attention_on_a_target_triton_lacks(tmp_path, gpu, version, refused):
    result = _check(_small(tmp_path), gpu, version)
    assert ("SP-ROCM-006" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-ROCM-006")
        assert f.category == "attention_backend"
        assert "unsupported target: 'gfx906'" in f.detail
        assert any("deduceISAFamily" in e.source for e in f.evidence)


def test_v0_without_triton_flash_attention_escapes(tmp_path):
    # VLLM_USE_TRITON_FLASH_ATTN=0: V0 prefill through CK flash-attn or SDPA, no Triton
    model = _small(tmp_path)
    failing = _check(model, "mi60", "0.5.4")
    assert finding(failing, "SP-ROCM-006").remedies[0].change == "export VLLM_USE_TRITON_FLASH_ATTN=0"
    passing = _check(model, "mi60", "0.5.4", env={"VLLM_USE_TRITON_FLASH_ATTN": "0"})
    assert "SP-ROCM-006" not in codes(passing)
    # from 0.11 there is no V0 and the switch changes nothing
    v1 = _check(model, "mi60", "0.16.0", env={"VLLM_USE_TRITON_FLASH_ATTN": "0"})
    assert "SP-ROCM-006" in codes(v1)


def test_a_source_build_for_gfx906_still_needs_triton(tmp_path):
    # PYTORCH_ROCM_ARCH=gfx906 builds vLLM's HIP kernels for the MI50, not Triton's backend
    model = _small(tmp_path)
    result = _check(model, "mi50-32gb", "0.16.0", env={"PYTORCH_ROCM_ARCH": "gfx906"})
    assert "SP-ROCM-004" not in codes(result) and "SP-ROCM-006" in codes(result)


# --- FP8 on ROCm: torch._scaled_mm on gfx94x / gfx950 / gfx12 only ---------------------------

@pytest.mark.parametrize("gpu, version, refused", [
    ("rx-7900-xtx", "0.6.3", True),   # gfx1100
    ("mi250x", "0.8.5", True),        # gfx90a
    ("mi210", "0.19.0", True),
    ("mi300x", "0.6.3", False),       # gfx942
    ("mi355x", "0.16.0", False),      # gfx950
    ("rx-9070-xt", "0.16.0", False),  # gfx1201
])
def test_fp8_checkpoint_needs_fp8_gemms(tmp_path, gpu, version, refused):
    result = _check(_small(tmp_path, quant=FP8), gpu, version)
    assert ("SP-ROCM-005" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-ROCM-005")
        assert f.category == "quantization_support" and "torch._scaled_mm" in f.detail


def test_online_fp8_is_the_same_gemm_and_a_16bit_checkpoint_is_not(tmp_path):
    model = _small(tmp_path)
    assert "SP-ROCM-005" in codes(_check(model, "mi250x", "0.10.2", "--quantization", "fp8"))
    assert "SP-ROCM-005" not in codes(_check(model, "mi250x", "0.10.2"))


def test_fp8_refusal_comes_after_a_weights_oom_and_before_kv_profiling():
    # the profiling run's first linear layer: after weights load (SP-MEM-001), before SP-MEM-003
    assert engine_stage("SP-MEM-001") < engine_stage("SP-ROCM-005") < engine_stage("SP-MEM-003")
    assert engine_stage("SP-ROCM-005") < engine_stage("SP-ROCM-006")
    # a refusal in attention selection stays before the weights
    assert engine_stage("SP-ROCM-002") < engine_stage("SP-MEM-001")


# --- the V0 selection: ROCM_FLASH and PagedAttention's head sizes ----------------------------

def test_v0_rocm_flash_is_the_resolved_selection(tmp_path):
    result = _check(_small(tmp_path), "mi300x", "0.6.3")
    assert "attention backend on ROCm" not in _facts(result)
    assert any("ROCm attention: ROCM_FLASH" in n for n in result.notes)


def test_v0_head_size_paged_attention_lacks(tmp_path):
    model = _small(tmp_path)
    config = json.loads((model / "config.json").read_text())
    config["head_dim"] = 160  # not in PagedAttention.get_supported_head_sizes()
    (model / "config.json").write_text(json.dumps(config))
    f = finding(_check(model, "mi300x", "0.6.3"), "SP-ROCM-002")
    assert "Head size 160 is not supported by PagedAttention" in f.detail
    config["head_dim"] = 128
    (model / "config.json").write_text(json.dumps(config))
    assert "SP-ROCM-002" not in codes(_check(model, "mi300x", "0.6.3"))


def test_releases_between_0_8_2_and_0_8_5_stay_unknown_for_selection(tmp_path):
    # 0.8.3/0.8.4 not read: 0.8.2 has no AITER MLA branch, 0.8.5 has
    result = _check(_small(tmp_path), "mi300x", "0.8.3")
    assert "attention backend on ROCm" in _facts(result)
    assert "attention backend on ROCm" not in _facts(_check(_small(tmp_path), "mi300x", "0.9.2"))


# --- builds read per release ------------------------------------------------------------------

@pytest.mark.parametrize("gpu, version, refused", [
    ("mi100", "0.6.3", False),      # Dockerfile.rocm@v0.6.3: gfx908;gfx90a;gfx942;gfx1100
    ("mi100", "0.7.3", True),       # Dockerfile.rocm_base@v0.7.3: gfx90a;gfx942
    ("rx-7900-xtx", "0.7.3", True),
    ("rx-7900-xtx", "0.9.2", False),
    ("mi300x", "0.7.3", False),
])
def test_build_targets_of_the_releases_read(tmp_path, gpu, version, refused):
    result = _check(_small(tmp_path), gpu, version)
    assert ("SP-ROCM-004" in codes(result)) is refused
    if refused and gpu == "rx-7900-xtx":
        assert finding(result, "SP-ROCM-004").remedies[0].change.startswith(
            "the vLLM ROCm image of 0.8.5")


def test_a_release_before_the_sdists_carry_a_dockerfile_is_unknown(tmp_path):
    result = _check(_small(tmp_path), "mi300x", "0.5.4")
    assert "ROCm build targets" in _facts(result) and "SP-ROCM-004" not in codes(result)


# --- AITER's MXFP4 batched matmul (0.16) ------------------------------------------------------

def _bf16_mla(root):
    root.mkdir(parents=True, exist_ok=True)
    _write(root, "config.json", dict(MLA_TEXT, num_hidden_layers=4, n_routed_experts=8,
                                     max_position_embeddings=4096))
    _index(root, 20 * 10**9)
    return root


@pytest.mark.parametrize("gpu, version, env, refused", [
    ("mi300xx8", "0.16.0", {"VLLM_ROCM_USE_AITER": "1"}, True),
    ("mi300xx8", "0.16.0", {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_FP4BMM": "0"}, False),
    ("mi300xx8", "0.16.0", {}, False),                              # AITER off
    ("mi300xx8", "0.17.0", {"VLLM_ROCM_USE_AITER": "1"}, False),    # gated on gfx950
    ("mi355xx8", "0.16.0", {"VLLM_ROCM_USE_AITER": "1"}, False),    # gfx950 has MXFP4
])
def test_aiter_fp4_bmm_off_gfx950(tmp_path, gpu, version, env, refused):
    result = _check(_bf16_mla(tmp_path / "m"), gpu, version, "-tp", "8", env=env)
    assert ("SP-ROCM-007" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-ROCM-007")
        assert f.category == "quantization_support" and "gfx942" in f.detail
        assert f.remedies[0].change == "export VLLM_ROCM_USE_AITER_FP4BMM=0"


def test_aiter_fp4_bmm_skips_a_quantized_kv_b_proj(tmp_path):
    model = _bf16_mla(tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                     "weight_block_size": [128, 128]}
    (model / "config.json").write_text(json.dumps(config))
    result = _check(model, "mi300xx8", "0.16.0", "-tp", "8", env={"VLLM_ROCM_USE_AITER": "1"})
    assert "SP-ROCM-007" not in codes(result)


def test_a_fork_image_or_own_triton_is_not_judged(tmp_path):
    # gfx906 ports ship their own Triton: what they compile for was not read
    model = _small(tmp_path)
    fork = build_deployment(command=["docker", "run", "--ipc=host", "example/vllm-gfx906:v0.11.2",
                                     "vllm", "serve", str(model)], gpu="mi50-32gb",
                            engine_version="0.11.2", probe=False)
    assert "SP-ROCM-006" not in codes(run_checks(fork))
    own = _check(model, "mi60", "0.6.3", env={"PYTHONPATH": "/opt/triton-gcn5/python"})
    assert "SP-ROCM-006" not in codes(own)
    assert "SP-ROCM-006" in codes(_check(model, "mi60", "0.6.3"))


# --- the quantization method's activation dtypes ---------------------------------------------

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


@pytest.mark.parametrize("dtype, flags, refused", [
    ("bfloat16", (), True),                      # awq on ROCm: float16 only
    ("float16", (), False),
    ("bfloat16", ("--dtype", "float16"), False),
])
def test_awq_activation_dtype_on_rocm(tmp_path, dtype, flags, refused):
    model = _small(tmp_path, quant=AWQ, dtype=dtype)
    result = _check(model, "mi300x", "0.16.0", *flags)
    assert ("SP-ROCM-008" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-ROCM-008")
        assert "torch.bfloat16 is not supported for quantization method awq" in f.detail
        assert f.remedies[0].change == "--dtype float16"
        assert result.findings[0].code == "SP-ROCM-008"  # at configuration, before any kernel


def test_mxfp4_forced_to_float16(tmp_path):
    quant = {"quant_method": "mxfp4"}
    model = _small(tmp_path, quant=quant)
    refused = _check(model, "mi300x", "0.11.0", "--dtype", "float16")
    assert "torch.float16 is not supported for quantization method mxfp4" in finding(
        refused, "SP-ROCM-008").detail
    assert "SP-ROCM-008" not in codes(_check(model, "mi300x", "0.11.0"))


def test_awq_on_rocm_from_0_19_may_convert_to_marlin_but_gptq_does_not(tmp_path):
    # 0.19: is_awq_marlin_compatible asks is_cuda_alike(); is_gptq_marlin_compatible CUDA/CPU only
    awq = _small(tmp_path / "a", quant=AWQ, dtype="bfloat16")
    assert "SP-ROCM-008" in codes(_check(awq, "mi300x", "0.18.0"))
    assert "SP-ROCM-008" not in codes(_check(awq, "mi300x", "0.19.0"))
    gptq = _small(tmp_path / "g", quant={"quant_method": "gptq", "bits": 4, "group_size": 128,
                                         "desc_act": False, "sym": True}, dtype="bfloat16")
    assert "SP-ROCM-008" in codes(_check(gptq, "mi300x", "0.19.0"))


# --- 0.19-0.20: the validated selection, forced backends -------------------------------------

def test_forced_rocm_attn_refuses_attention_sinks(tmp_path):
    from checkfixtures import gpt_oss_120b

    model = gpt_oss_120b(tmp_path / "m")
    forced = _check(model, "mi300xx8", "0.19.0", "-tp", "8", "--attention-backend", "ROCM_ATTN")
    f = finding(forced, "SP-ROCM-002")
    assert "ROCM_ATTN is not valid for this configuration" in f.detail
    assert "attention sinks not supported" in f.detail
    triton = _check(model, "mi300xx8", "0.19.0", "-tp", "8", "--attention-backend", "TRITON_ATTN")
    assert "SP-ROCM-002" not in codes(triton)
    default = _check(model, "mi300xx8", "0.20.0", "-tp", "8")
    assert "SP-ROCM-002" not in codes(default)
    assert "attention backend on ROCm" not in _facts(default)


@pytest.mark.parametrize("gpu, refused", [("rx-7900-xtx", True), ("mi300x", False)])
def test_forced_aiter_fa_needs_mi300(tmp_path, gpu, refused):
    model = _small(tmp_path)
    result = _check(model, gpu, "0.19.0", "--attention-backend", "ROCM_AITER_FA")
    assert ("SP-ROCM-002" in codes(result)) is refused
    if refused:
        assert "compute capability not supported" in finding(result, "SP-ROCM-002").detail


def test_019_default_takes_rocm_attn_when_it_is_valid(tmp_path):
    result = _check(_small(tmp_path), "mi300x", "0.19.0")
    assert any(n.startswith("ROCm attention: ROCM_ATTN ") for n in result.notes)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["head_dim"] = 512  # not among ROCM_ATTN's head sizes; TRITON_ATTN takes it
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    result = _check(tmp_path / "m", "mi300x", "0.19.0")
    assert "SP-ROCM-002" not in codes(result)
    assert any(n.startswith("ROCm attention: TRITON_ATTN") for n in result.notes)


def test_0_8_to_0_10_offer_no_v0_switch_as_the_fix(tmp_path):
    # V1 by default from 0.8: VLLM_USE_TRITON_FLASH_ATTN=0 does not take Triton out of the path
    model = _small(tmp_path)
    f = finding(_check(model, "mi60", "0.9.2"), "SP-ROCM-006")
    assert not any("VLLM_USE_TRITON_FLASH_ATTN" in r.change for r in f.remedies)
    v0 = _check(model, "mi60", "0.9.2", env={"VLLM_USE_V1": "0"})
    assert finding(v0, "SP-ROCM-006").remedies[0].change == "export VLLM_USE_TRITON_FLASH_ATTN=0"


# --- 0.8.5-0.10.2: AITER MLA takes block size 1 only ------------------------------------------

@pytest.mark.parametrize("version, env, flags, refused", [
    ("0.9.2", {"VLLM_ROCM_USE_AITER": "1"}, (), True),             # block size 16 by default
    ("0.10.2", {"VLLM_ROCM_USE_AITER": "1"}, ("--block-size", "1"), False),
    ("0.9.2", {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_MLA": "0"}, (), False),
    ("0.9.2", {}, (), False),                                        # TRITON_MLA
    ("0.8.2", {"VLLM_ROCM_USE_AITER": "1"}, (), False),              # no AITER MLA branch yet
    ("0.9.2", {}, ("--block-size", "1"), False),                     # block 1 picks AITER MLA
])
def test_aiter_mla_block_size(tmp_path, version, env, flags, refused):
    result = _check(_bf16_mla(tmp_path / "m"), "mi300xx8", version, "-tp", "8", *flags, env=env)
    assert ("SP-ROCM-002" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-ROCM-002")
        assert "ROCM_AITER_MLA,does not support block size 16" in f.detail
        assert f.remedies[0].change == "--block-size 1"


def test_forced_non_mla_backend_for_an_mla_model_0_9(tmp_path):
    model = _bf16_mla(tmp_path / "m")
    env = {"VLLM_ATTENTION_BACKEND": "ROCM_FLASH"}
    f = finding(_check(model, "mi300xx8", "0.9.2", "-tp", "8", env=env), "SP-ROCM-002")
    assert "is not MLA type" in f.detail
    plain = _small(tmp_path / "p")
    assert "SP-ROCM-002" not in codes(_check(plain, "mi300x", "0.9.2", env=env))


def test_a_moe_model_needs_triton_even_without_triton_attention(tmp_path):
    # fused_moe's expert kernel is Triton: VLLM_USE_TRITON_FLASH_ATTN=0 does not avoid it
    from checkfixtures import qwen3_30b_a3b_config

    root = tmp_path / "moe"
    root.mkdir()
    _write(root, "config.json", qwen3_30b_a3b_config())
    _index(root, 60 * 10**9)
    env = {"VLLM_USE_TRITON_FLASH_ATTN": "0"}
    moe = _check(root, "mi60", "0.5.4", "--max-model-len", "4096", env=env)
    f = finding(moe, "SP-ROCM-009")
    assert f.category == "cuda_driver_arch" and "SP-ROCM-006" not in codes(moe)
    assert "fused_moe" in f.detail and not f.remedies[0].change.startswith("export")
    dense = _check(_small(tmp_path), "mi60", "0.5.4", env=env)
    assert "SP-ROCM-006" not in codes(dense) and "SP-ROCM-009" not in codes(dense)
    # with Triton attention on, the attention kernel is the first Triton compile
    assert "SP-ROCM-006" in codes(_check(root, "mi60", "0.5.4", "--max-model-len", "4096"))


# --- ROCm quantization lists read per release -------------------------------------------------

@pytest.mark.parametrize("version, method, refused", [
    ("0.5.4", "fp8", True),     # vllm/config.py@v0.5.4: rocm_supported_quantization gptq, squeezellm
    ("0.5.5", "fp8", False),
    ("0.5.4", "awq", True),
    ("0.6.0", "awq", False),
    ("0.6.1", "compressed-tensors", True),
    ("0.6.3", "compressed-tensors", False),
    ("0.6.4", "gguf", True),
    ("0.7.0", "quark", False),
])
def test_rocm_quantization_lists_of_the_releases_read(tmp_path, version, method, refused):
    model = _small(tmp_path, dtype="float16")
    result = _check(model, "mi300x", version, "--quantization", method)
    assert ("SP-ROCM-001" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-ROCM-001")
        assert f"{method} quantization is currently not supported in ROCm." in f.detail


def test_the_upgrade_names_the_first_release_read_that_offers_the_method(tmp_path):
    f = finding(_check(_small(tmp_path, dtype="float16"), "mi300x", "0.6.1", "--quantization",
                       "compressed-tensors"), "SP-ROCM-001")
    assert f.remedies[0].kind == "upgrade" and "vllm>=0.6.2" in f.remedies[0].change


def test_0_34_aiter_fa_takes_sinks_and_needs_cdna3(tmp_path):
    from checkfixtures import gpt_oss_120b

    model = gpt_oss_120b(tmp_path / "m")
    flags = ("-tp", "8", "--attention-backend", "ROCM_AITER_FA")
    assert "SP-ROCM-002" not in codes(_check(model, "mi300xx8", "0.34.0", *flags))
    old = finding(_check(model, "mi300xx8", "0.20.0", *flags), "SP-ROCM-002")
    assert "attention sinks not supported" in old.detail
    small = _small(tmp_path / "s")
    f = finding(_check(small, "mi250x", "0.34.0", "--attention-backend", "ROCM_AITER_FA"),
                "SP-ROCM-002")
    assert "compute capability not supported" in f.detail


CT = {"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"],
                                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                "symmetric": True, "dynamic": False},
                                    "input_activations": {"num_bits": 8, "type": "float",
                                                          "strategy": "token", "dynamic": True,
                                                          "symmetric": True}}}}


def test_compressed_tensors_fp8_w8a8_is_the_same_fp8_gemm(tmp_path):
    model = _small(tmp_path, quant=CT)
    f = finding(_check(model, "mi250x", "0.10.2"), "SP-ROCM-005")
    assert "compressed-tensors FP8 (W8A8)" in f.detail
    assert "SP-ROCM-005" not in codes(_check(model, "mi300x", "0.10.2"))
    int8 = json.loads(json.dumps(CT))
    int8["config_groups"]["group_0"]["weights"].update(type="int", num_bits=4)
    int8["config_groups"]["group_0"].pop("input_activations")
    other = _small(tmp_path / "w4", quant=int8)
    assert "SP-ROCM-005" not in codes(_check(other, "mi250x", "0.10.2"))


@pytest.mark.parametrize("version, refused", [("0.22.0", True), ("0.23.0", False)])
def test_aiter_fa_takes_sinks_from_0_23(tmp_path, version, refused):
    from checkfixtures import gpt_oss_120b

    model = gpt_oss_120b(tmp_path / "m")
    result = _check(model, "mi300xx8", version, "-tp", "8", "--attention-backend", "ROCM_AITER_FA")
    assert ("SP-ROCM-002" in codes(result)) is refused


@pytest.mark.parametrize("version, refused", [("0.25.0", True), ("0.26.0", False)])
def test_aiter_unified_attention_float16_in_0_25(tmp_path, version, refused):
    # rocm_aiter_unified_attn.py@v0.25.0: supported_dtypes = [torch.bfloat16]
    model = _small(tmp_path, dtype="float16")
    result = _check(model, "mi300x", version, "--attention-backend", "ROCM_AITER_UNIFIED_ATTN")
    assert ("SP-ROCM-002" in codes(result)) is refused
    if refused:
        assert "dtype not supported" in finding(result, "SP-ROCM-002").detail
