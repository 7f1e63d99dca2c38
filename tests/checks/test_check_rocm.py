"""vLLM on AMD GPUs (ROCm) and accelerators servepilot has no platform facts for (issue 13).

Each rule has a launch that fails and one that does not; the CUDA-only rules stay off AMD GPUs;
a GPU whose platform servepilot does not know answers `unknown` (exit 4), never PASS.
"""

from __future__ import annotations

import json

import pytest
from checkfixtures import codes, finding, llama_like, sparse_mla

from servepilot.checks import run_checks
from servepilot.checks.platforms import rule_applies
from servepilot.checks.registry import find_rule, load_rules
from servepilot.cli.main import main
from servepilot.deployment import build_deployment

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
BNB = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
MODELOPT_FP8 = {"quant_method": "modelopt", "quant_algo": "FP8"}


def _check(path, gpu: str, version: str, *flags: str):
    dep = build_deployment(
        command=["vllm", "serve", str(path), *flags], gpu=gpu, engine_version=version, probe=False
    )
    return run_checks(dep)


def _facts(result) -> list[str]:
    return [u.fact for u in result.unknowns]


def test_a_method_rocm_does_not_offer_fails(tmp_path):
    # ModelOpt FP8 is a CUDA method: vLLM 0.16.0's RocmPlatform.supported_quantization lacks it
    model = llama_like(tmp_path / "m", quant=MODELOPT_FP8)
    result = _check(model, "mi300x", "0.16.0")
    assert result.verdict == "fail"
    first = result.findings[0]
    assert first.code == "SP-ROCM-001" and first.category == "quantization_support"
    assert "modelopt quantization is currently not supported in rocm" in first.detail
    assert any("vllm/platforms/rocm.py@v0.16.0" in e.source for e in first.evidence)


def test_a_method_rocm_offers_does_not_fail(tmp_path):
    # float16, as AWQ checkpoints are: awq takes float16 activations only (SP-ROCM-008)
    model = llama_like(tmp_path / "m", quant=AWQ, dtype="float16")
    result = _check(model, "mi300x", "0.16.0")
    assert "SP-ROCM-001" not in codes(result)
    assert result.verdict in ("pass", "warn") and not result.unknowns


def test_awq_before_rocm_offered_it_and_the_upgrade(tmp_path):
    # 0.5.5 (vllm/config.py rocm_supported_quantization = gptq, squeezellm, fp8): AWQ stops there
    model = llama_like(tmp_path / "m", quant=AWQ)
    result = _check(model, "mi250x", "0.5.5")
    f = next(f for f in result.findings if f.code == "SP-ROCM-001")
    assert "currently not supported in ROCm" in f.detail
    # vllm/config.py@v0.6.0 adds awq to rocm_supported_quantization
    assert f.remedies[0].kind == "upgrade" and "vllm>=0.6.0" in f.remedies[0].change


@pytest.mark.parametrize("gpu, refused", [("mi300x", True), ("rx-7900-xtx", False)])
def test_bitsandbytes_is_offered_off_gfx9_only(tmp_path, gpu, refused):
    # 0.16.0: `if not on_gfx9(): supported_quantization += ["bitsandbytes"]`
    model = llama_like(tmp_path / "m", quant=BNB, heads=8, kv_heads=8)
    result = _check(model, gpu, "0.16.0")
    assert ("SP-ROCM-001" in codes(result)) is refused


def test_explicit_quantization_flag_is_what_is_verified(tmp_path):
    model = llama_like(tmp_path / "m")
    assert "SP-ROCM-001" in codes(_check(model, "mi300x", "0.16.0", "--quantization", "modelopt"))
    assert "SP-ROCM-001" not in codes(_check(model, "mi300x", "0.16.0", "--quantization", "fp8"))


def test_a_release_between_reads_that_disagree_is_unknown(tmp_path):
    # mxfp4: absent at 0.9.2, listed at 0.10.1; 0.10.0 was not read
    model = llama_like(tmp_path / "m")
    result = _check(model, "mi300x", "0.10.0", "--quantization", "mxfp4")
    assert "SP-ROCM-001" not in codes(result)
    assert "quantization on ROCm" in _facts(result) and result.verdict == "unknown"


def test_cuda_only_rules_stay_off_amd_gpus():
    load_rules()
    cuda_only = [r for r in load_rules() if not r.platforms]
    assert cuda_only, "the registry has CUDA rules"
    assert not any(rule_applies(r, "rocm") or rule_applies(r, "unknown") for r in cuda_only)
    assert all(rule_applies(r, "cuda") for r in cuda_only)
    rocm = find_rule("SP-ROCM-001")
    assert rule_applies(rocm, "rocm") and not rule_applies(rocm, "cuda")
    # a rule of memory arithmetic declares itself neutral and judges every platform
    memory = find_rule("SP-MEM-001")
    assert all(rule_applies(memory, p) for p in (None, "cuda", "rocm", "unknown"))


def test_modelopt_fp4_on_amd_is_judged_by_rocm_facts_not_compute_capability(tmp_path):
    # on an H100 the CUDA rule speaks (SP-QUANT-00x); on an MI300X only the ROCm list does
    model = llama_like(tmp_path / "m", quant={"quant_method": "modelopt", "quant_algo": "NVFP4"})
    on_amd = codes(_check(model, "mi300x", "0.16.0"))
    assert "SP-ROCM-001" in on_amd and not any(
        c.startswith(("SP-QUANT", "SP-ATTN", "SP-CUDA")) for c in on_amd
    )


def test_memory_rules_carry_over_to_amd(tmp_path):
    # 16 GB of weights on a 16 GiB RX 9070 XT leave no KV cache: the memory arithmetic holds on ROCm
    model = llama_like(tmp_path / "m")
    small = _check(model, "rx-9070-xt", "0.16.0")
    assert small.verdict == "fail" and small.findings[0].code in ("SP-MEM-001", "SP-MEM-003")
    assert not any(c.startswith("SP-MEM") for c in codes(_check(model, "mi300x", "0.16.0")))


def test_sglang_on_amd_is_unknown_not_pass(tmp_path):
    model = llama_like(tmp_path / "m")
    dep = build_deployment(
        command=["python3", "-m", "sglang.launch_server", "--model-path", str(model)],
        gpu="mi300x",
        engine_version="0.5.5",
        probe=False,
    )
    result = run_checks(dep)
    assert result.verdict == "unknown" and "kernels on ROCm" in _facts(result)


@pytest.mark.parametrize(
    "gpu, fact",
    [
        ("gaudi3x8", "GPU platform"),
        ("ascend-910bx8", "GPU platform"),
        ("arc-a770", "GPU platform"),
        ("amd-gpu", "GPU platform"),
    ],
)
def test_an_accelerator_without_platform_facts_is_unknown_exit_4(tmp_path, capsys, gpu, fact):
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8)
    rc = main(
        [
            "check",
            "--json",
            "--gpu",
            gpu,
            "--engine-version",
            "0.16.0",
            "--",
            "vllm",
            "serve",
            str(model),
        ]
    )
    obj = json.loads(capsys.readouterr().out)
    assert rc == 4 and obj["verdict"] == "unknown"
    unknown = next(u for u in obj["unknowns"] if u["fact"] == fact)
    assert unknown["settle"]


def test_the_same_command_on_an_nvidia_gpu_is_not_held_unknown(tmp_path, capsys):
    # the guard of the test above: the unknown comes from the accelerator, not the command
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8)
    main(
        [
            "check",
            "--json",
            "--gpu",
            "h100",
            "--engine-version",
            "0.16.0",
            "--",
            "vllm",
            "serve",
            str(model),
        ]
    )
    facts = [u["fact"] for u in json.loads(capsys.readouterr().out)["unknowns"]]
    assert "GPU platform" not in facts and "attention backend on ROCm" not in facts


def test_mi300x_check_exits_4_naming_the_rocm_attention_unknown(tmp_path, capsys):
    # 0.22.1 was not read: 0.22.0 and 0.23.0 differ (ROCM_AITER_FA takes sinks from 0.23)
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8)
    rc = main(
        [
            "check",
            "--gpu",
            "mi300x",
            "--engine-version",
            "0.22.1",
            "--",
            "vllm",
            "serve",
            str(model),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 4 and "attention backend on ROCm" in out and "unknown GPU" not in out


def test_rocm_default_attention_is_resolved_with_its_source(tmp_path):
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8)
    result = _check(model, "mi300x", "0.16.0")
    assert "attention backend on ROCm" not in _facts(result)
    assert any("ROCm attention: TRITON_ATTN" in n and "@v0.16.0" in n for n in result.notes)


@pytest.mark.parametrize("backend, refused", [("FLASHINFER", True), ("TRITON_ATTN", False),
                                              ("ROCM_ATTN", False)])
def test_a_forced_backend_rocm_does_not_offer_fails(tmp_path, backend, refused):
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8)
    result = _check(model, "mi300x", "0.16.0", "--attention-backend", backend)
    assert ("SP-ROCM-002" in codes(result)) is refused
    if refused:
        f = result.findings[0]
        assert f.code == "SP-ROCM-002" and f.category == "attention_backend"
        assert f"Attention backend {backend} is not supported on ROCm" in f.detail


@pytest.mark.parametrize("gpu, refused", [("rx-7900-xtx", True), ("mi300x", False)])
def test_aiter_flash_attention_forced_off_gfx9_fails(tmp_path, gpu, refused):
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8)
    result = _check(model, gpu, "0.16.0", "--attention-backend", "ROCM_AITER_FA")
    assert ("SP-ROCM-002" in codes(result)) is refused


@pytest.mark.parametrize("version, code", [("0.11.0", "SP-ROCM-002"), ("0.16.0", "SP-ROCM-003")])
def test_sparse_mla_on_rocm(tmp_path, version, code):
    # 0.11.0 refuses sparse attention on ROCm; 0.12-0.17 run it on a backend refusing fp8 KV
    model = sparse_mla(tmp_path / "m")
    failing = _check(model, "mi300xx8", version, "-tp", "8", "--kv-cache-dtype", "fp8")
    assert code in codes(failing)
    if version == "0.16.0":
        assert finding(failing, code).category == "kv_cache_dtype"
        passing = _check(model, "mi300xx8", version, "-tp", "8")
        assert code not in codes(passing)


@pytest.mark.parametrize("gpu, version, refused", [
    ("mi100", "0.16.0", True), ("mi100", "0.6.6", False), ("mi355x", "0.10.2", True),
    ("mi355x", "0.11.0", False), ("mi60", "0.16.0", True), ("mi50-16gb", "0.16.0", True),
])
def test_rocm_image_build_targets(tmp_path, gpu, version, refused):
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8, max_pos=4096)
    result = _check(model, gpu, version)
    assert ("SP-ROCM-004" in codes(result)) is refused
    if refused:
        assert finding(result, "SP-ROCM-004").category == "cuda_driver_arch"


def test_build_targets_between_reads_that_disagree_are_unknown(tmp_path):
    # gfx950: absent at 0.10.2, present at 0.11.0; no release between was read
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8, max_pos=4096)
    result = _check(model, "mi355x", "0.10.3")
    assert "SP-ROCM-004" not in codes(result) and "ROCm build targets" in _facts(result)


def test_a_source_build_for_the_gpu_is_not_held_to_the_image_targets(tmp_path):
    # PYTORCH_ROCM_ARCH=gfx906 in the command: a build for the MI50's own target
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8, max_pos=4096)
    dep = build_deployment(command=["env", "PYTORCH_ROCM_ARCH=gfx906", "vllm", "serve", str(model)],
                           gpu="mi50-32gb", engine_version="0.16.0", probe=False)
    assert "SP-ROCM-004" not in codes(run_checks(dep))
    assert "SP-ROCM-004" in codes(_check(model, "mi50-32gb", "0.16.0"))


def test_an_image_other_than_vllms_own_has_unknown_build_targets(tmp_path):
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8, max_pos=4096)
    dep = build_deployment(command=["docker", "run", "--ipc=host", "example/vllm-gfx906:v0.16.0", "vllm", "serve",
                                    str(model)], gpu="mi50-32gb", engine_version="0.16.0", probe=False)
    result = run_checks(dep)
    assert "SP-ROCM-004" not in codes(result) and "ROCm build targets" in _facts(result)


def test_018_default_path_is_resolved_and_a_small_head_size_fails(tmp_path):
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8)
    ok = _check(model, "mi300x", "0.18.0")
    assert "attention backend on ROCm" not in _facts(ok) and "SP-ROCM-002" not in codes(ok)
    config = json.loads((model / "config.json").read_text())
    config["head_dim"] = 16  # TritonAttentionBackend.supports_head_size: head_size >= 32
    (model / "config.json").write_text(json.dumps(config))
    small = _check(model, "mi300x", "0.18.0")
    f = finding(small, "SP-ROCM-002")
    assert "No valid attention backend found for rocm" in f.detail and "head_size 16" in f.detail
    assert "SP-ROCM-002" not in codes(_check(model, "mi300x", "0.16.0"))  # 0.16: no validation


def test_018_forced_backend_is_unknown_not_judged(tmp_path):
    model = llama_like(tmp_path / "m", heads=8, kv_heads=8)
    result = _check(model, "mi300x", "0.18.0", "--attention-backend", "FLASHINFER")
    assert "SP-ROCM-002" not in codes(result) and "attention backend on ROCm" in _facts(result)
