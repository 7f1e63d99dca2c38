"""SGLang's own quantization kernels per GPU generation and release (quantization.yaml):
the loader's minimum capability per method (SP-QUANT-001), FP8 on compute capability 8.0-8.8
(SP-QUANT-020: Triton has no fp8e4nv there; Marlin W8A16 only where the release turns it on),
and the custom all-reduce's peer-access probe on GeForce pairs (SP-NCCL-002)."""

from __future__ import annotations

import pytest
from checkfixtures import (
    GIB,
    _index,
    _write,
    codes,
    deployment,
    finding,
    llama_like,
    qwen3_30b_a3b_config,
)

from servepilot.checks import run_checks
from servepilot.hardware.cluster import Gpu

BLOCK_FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
TENSOR_FP8 = {"quant_method": "fp8", "activation_scheme": "static"}
FP8E4NV = "type fp8e4nv not supported in this architecture"


def moe_fp8(root, quant=BLOCK_FP8, total=31 * 10**9):
    """Qwen3-30B-A3B-FP8-shaped: 128 FP8 experts per MoE layer."""
    root.mkdir(parents=True, exist_ok=True)
    _write(root, "config.json", qwen3_30b_a3b_config(quantization_config=quant))
    _index(root, total)
    return root


def sglang(path, cc, version, *, env=None, memory=48 * GIB, n=1, **options):
    return deployment(path, cc=cc, n=n, version=version, engine="sglang",
                      options={"tp_size": n, **options}, env=env, memory=memory)


# ---- FP8 MoE experts: the Triton fused-MoE kernel in every release read ---------------------

@pytest.mark.parametrize("version", ["0.4.5.post3", "0.5.4.post3", "0.5.10.post1", "0.5.23"])
def test_fp8_experts_below_8_9_fail_at_the_first_forward(tmp_path, version):
    # https://github.com/sgl-project/sglang/issues/12887 (FP8 MoE on A100 / A6000 / 3090)
    result = run_checks(sglang(moe_fp8(tmp_path / "m"), (8, 6), version))
    f = finding(result, "SP-QUANT-020")
    assert f.severity == "error" and f.category == "quantization_support"
    assert FP8E4NV in f.detail and "MoE experts" in f.title
    assert result.verdict == "fail"
    # MoE experts have no Marlin path: no upgrade is offered, another checkpoint or GPU is
    assert {r.kind for r in f.remedies} == {"hardware", "overlay"}


@pytest.mark.parametrize("cc", [(8, 9), (9, 0)])
def test_fp8_experts_from_8_9_compile(tmp_path, cc):
    result = run_checks(sglang(moe_fp8(tmp_path / "m"), cc, "0.5.4.post3", memory=80 * GIB))
    assert "SP-QUANT-020" not in codes(result)


def test_a_16_bit_moe_on_ampere_is_not_an_fp8_case(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    _write(root, "config.json", qwen3_30b_a3b_config())
    _index(root, 61 * 10**9)
    result = run_checks(sglang(root, (8, 0), "0.5.4.post3", memory=80 * GIB))
    assert "SP-QUANT-020" not in codes(result)


def test_another_moe_runner_backend_is_not_judged(tmp_path):
    dep = sglang(moe_fp8(tmp_path / "m"), (8, 6), "0.5.23",
                 moe_runner_backend="flashinfer_cutlass")
    result = run_checks(dep)
    assert "SP-QUANT-020" not in codes(result)
    assert any("--moe-runner-backend flashinfer_cutlass" in n for n in result.notes)


def test_compressed_tensors_fp8_experts_take_the_triton_kernel_too(tmp_path):
    # compressed_tensors_w8a8_fp8_moe.py@v0.5.9: MoeRunnerBackend.TRITON, use_fp8_w8a8=True
    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel"}
    quant = {"quant_method": "compressed-tensors",
             "config_groups": {"group_0": {"targets": ["Linear"], "weights": fp8,
                                           "input_activations": {**fp8, "dynamic": True}}}}
    result = run_checks(sglang(moe_fp8(tmp_path / "m", quant=quant), (8, 0), "0.5.9",
                               memory=80 * GIB))
    assert FP8E4NV in finding(result, "SP-QUANT-020").detail
    weight_only = {**quant, "config_groups": {"group_0": {"targets": ["Linear"], "weights": fp8}}}
    dense = run_checks(sglang(moe_fp8(tmp_path / "w", quant=weight_only), (8, 0), "0.5.9",
                              memory=80 * GIB))
    assert "SP-QUANT-020" not in codes(dense)  # FP8A16: not the W8A8 MoE scheme


def test_online_fp8_of_a_16_bit_moe_takes_the_same_kernel(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    _write(root, "config.json", qwen3_30b_a3b_config())
    _index(root, 61 * 10**9)
    result = run_checks(sglang(root, (8, 0), "0.5.10.post1", memory=80 * GIB, quantization="fp8"))
    assert FP8E4NV in finding(result, "SP-QUANT-020").detail


def test_engine_order_weights_oom_first_then_the_fp8_kernel(tmp_path):
    """The Triton kernel compiles at the first forward, after the weights are allocated; a
    minimum-capability refusal comes at model construction, before them."""
    big = moe_fp8(tmp_path / "big", total=220 * 10**9)
    result = run_checks(sglang(big, (8, 6), "0.5.4.post3"))
    order = codes(result)
    assert order.index("SP-MEM-001") < order.index("SP-QUANT-020")
    refused = llama_like(tmp_path / "w8", quant={"quant_method": "w8a8_fp8"})
    _index(refused, 200 * 10**9)
    order = codes(run_checks(sglang(refused, (8, 6), "0.5.4.post3")))
    assert order[0] == "SP-QUANT-001" and "SP-MEM-001" in order


# ---- FP8 linear layers: Marlin W8A16 where the release turns it on -------------------------

def test_dense_block_fp8_runs_marlin_from_0_5_6(tmp_path):
    dense = llama_like(tmp_path / "d", quant=BLOCK_FP8)
    result = run_checks(sglang(dense, (8, 6), "0.5.10.post1"))
    assert "SP-QUANT-020" not in codes(result)
    assert "weight-only (Marlin)" in finding(result, "SP-QUANT-002").title
    assert result.resolution.quant.linear == "Marlin W8A16 (weight-only FP8)"


def test_dense_block_fp8_before_0_5_1_runs_the_triton_block_gemm(tmp_path):
    # fp8.py@v0.4.10.post2: "Marlin doesn't support block-wise fp8" turns Marlin off
    dense = llama_like(tmp_path / "d", quant=BLOCK_FP8)
    env = {"SGLANG_FORCE_FP8_MARLIN": "1"}
    f = finding(run_checks(sglang(dense, (8, 6), "0.4.10.post2", env=env)), "SP-QUANT-020")
    assert f.severity == "error" and FP8E4NV in f.detail and "linear layers" in f.title
    assert f.remedies[0].args == {"upgrade": {"package": "sglang", "specifier": ">=0.5.6"}}


def test_dense_per_tensor_fp8_in_0_4_needs_the_env_switch(tmp_path):
    dense = llama_like(tmp_path / "d", quant=TENSOR_FP8)
    f = finding(run_checks(sglang(dense, (8, 0), "0.4.1.post7")), "SP-QUANT-020")
    assert "torch._scaled_mm" in f.detail
    env = {"SGLANG_FORCE_FP8_MARLIN": "true"}
    forced = run_checks(sglang(dense, (8, 0), "0.4.1.post7", env=env))
    assert "SP-QUANT-020" not in codes(forced)
    assert forced.resolution.quant.fallback


def test_dense_fp8_between_0_5_1_and_0_5_6_depends_on_vllm_being_installed(tmp_path):
    dense = llama_like(tmp_path / "d", quant=BLOCK_FP8)
    result = run_checks(sglang(dense, (8, 6), "0.5.4.post3"))
    f = finding(result, "SP-QUANT-020")
    assert f.severity == "warning" and "vLLM" in f.title
    assert result.verdict == "unknown"
    assert any(u.fact == "FP8 linear kernels" for u in result.unknowns)
    own = run_checks(sglang(dense, (8, 6), "0.5.6"))
    assert not any(u.fact == "FP8 linear kernels" for u in own.unknowns)


# ---- get_min_capability per method and release ------------------------------------------------

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128}
NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}


def test_modelopt_nvfp4_needs_10_0_until_0_5_13_then_falls_back_to_marlin(tmp_path):
    model = llama_like(tmp_path / "n", quant=NVFP4)
    old = run_checks(sglang(model, (9, 0), "0.5.12", memory=80 * GIB))
    f = finding(old, "SP-QUANT-001")
    assert "Minimum capability: 100. Current capability: 90." in f.detail
    assert "SGLang refuses it" in f.detail
    new = run_checks(sglang(model, (9, 0), "0.5.13", memory=80 * GIB))
    assert "SP-QUANT-001" not in codes(new)
    assert "weight-only (Marlin)" in finding(new, "SP-QUANT-002").title
    native = run_checks(sglang(model, (10, 0), "0.5.12", memory=180 * GIB))
    assert not {"SP-QUANT-001", "SP-QUANT-002"} & set(codes(native))


@pytest.mark.parametrize(
    "quant, cc, version, refused, name",
    [
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, (8, 6), "0.5.4.post3", True,
         "modelopt_fp8"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, (8, 6), "0.5.3", True, "modelopt"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, (8, 9), "0.5.4.post3", False, None),
        (AWQ, (7, 0), "0.5.10.post1", True, "awq"),
        (AWQ, (7, 5), "0.5.10.post1", False, None),
        ({**AWQ, "quant_method": "gptq"}, (7, 0), "0.5.10.post1", False, None),
        ({"quant_method": "w8a8_int8"}, (7, 0), "0.4.1.post7", True, "w8a8_int8"),
        (BLOCK_FP8, (7, 5), "0.5.10.post1", True, "fp8"),  # Fp8Config.get_min_capability: 80
        (TENSOR_FP8, (7, 5), "0.4.0.post2", True, "fp8"),
    ],
)
def test_minimum_capability_per_method(tmp_path, quant, cc, version, refused, name):
    result = run_checks(sglang(llama_like(tmp_path / "q", quant=quant), cc, version))
    assert ("SP-QUANT-001" in codes(result)) == refused
    if refused:
        detail = finding(result, "SP-QUANT-001").detail
        assert f"The quantization method {name} is not supported" in detail


def test_a_method_the_release_was_not_read_for_is_unknown(tmp_path):
    # AWQ has no config class in the 0.4.4.post1 sdist read (it appears in 0.4.5.post3)
    model = llama_like(tmp_path / "q", quant=AWQ)
    result = run_checks(sglang(model, (8, 0), "0.4.4.post1"))
    assert any(u.fact == "quantization kernels" for u in result.unknowns)
    read = run_checks(sglang(model, (8, 0), "0.4.5.post3"))
    assert not any(u.fact == "quantization kernels" for u in read.unknowns)


# ---- custom all-reduce peer-access probe ----------------------------------------------------

def _geforce(n, name="NVIDIA GeForce RTX 4090", cc=(8, 9)):
    return tuple(Gpu(index=i, name=name, key=None, memory_bytes=24 * GIB, compute_capability=cc)
                 for i in range(n))


def _tp(tmp_path, gpus, tp, version="0.4.4.post1", **options):
    return deployment(llama_like(tmp_path / "m", heads=16, kv_heads=2, intermediate=4864),
                      version=version, engine="sglang", options={"tp_size": tp, **options},
                      gpu_list=gpus)


def test_a_geforce_pair_probes_peer_access(tmp_path):
    # https://github.com/sgl-project/sglang/issues/4814: TP 2 on 8x RTX 4090
    result = run_checks(_tp(tmp_path, _geforce(8), 2))
    f = finding(result, "SP-NCCL-002")
    assert f.severity == "warning" and f.category == "nccl_distributed"
    assert "peer access is not supported between these two devices" in f.detail
    assert f.remedies[0].args["set"] == {"disable_custom_all_reduce": True}
    assert any(u.fact == "GPU peer access" for u in result.unknowns)


@pytest.mark.parametrize(
    "gpus, tp, options",
    [
        (_geforce(8), 4, {}),  # more than two PCIe GPUs: disabled before the probe
        (_geforce(8), 2, {"disable_custom_all_reduce": True}),
        (_geforce(8, name="NVIDIA L40S"), 2, {}),  # datacenter cards offer peer access
        (_geforce(8), 1, {}),
    ],
)
def test_no_probe_no_finding(tmp_path, gpus, tp, options):
    assert "SP-NCCL-002" not in codes(run_checks(_tp(tmp_path, gpus, tp, **options)))
