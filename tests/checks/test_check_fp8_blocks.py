"""SP-TP-004: block-quantized FP8 experts need whole blocks on every rank."""

from __future__ import annotations

import pytest
from checkfixtures import GIB, _index, _write, codes, deployment, finding, qwen3_30b_a3b_config

from servepilot.checks import run_checks

BLOCK_FP8 = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


def qwen3_moe_fp8(root, moe_inter=768):
    """Qwen3-30B-A3B-FP8-shaped: 128 experts of intermediate size 768, 128x128 FP8 blocks."""
    root.mkdir(parents=True, exist_ok=True)
    _write(root, "config.json", qwen3_30b_a3b_config(moe_inter, quantization_config=BLOCK_FP8))
    _index(root, 31 * 10**9)
    return root


@pytest.mark.parametrize(
    "engine, version, options, tp, fails",
    [
        ("vllm", "0.10.0", {}, 8, True),  # 768 / 8 = 96
        ("vllm", "0.10.0", {}, 4, True),  # 192: not whole 128 blocks
        ("vllm", "0.10.0", {}, 2, False),  # 384 = 3 blocks
        ("vllm", "0.10.0", {"enable_expert_parallel": True}, 8, False),  # experts not split
        ("vllm", "0.6.4", {}, 8, False),  # before the releases read
        ("sglang", "0.5.2", {"tp_size": 8}, 8, True),
        ("sglang", "0.5.2", {"tp_size": 8, "ep_size": 8}, 8, False),
        ("sglang", "0.4.6.post5", {"tp_size": 8, "enable_ep_moe": True}, 8, False),
    ],
)
def test_routed_expert_slices_must_hold_whole_blocks(tmp_path, engine, version, options, tp, fails):
    opts = dict(options) if engine == "sglang" else {"tensor_parallel_size": tp, **options}
    dep = deployment(
        qwen3_moe_fp8(tmp_path / "q"),
        cc=(9, 0),
        n=8,
        version=version,
        engine=engine,
        options=opts,
        memory=80 * GIB,
    )
    assert ("SP-TP-004" in codes(run_checks(dep))) == fails


def test_the_finding_quotes_the_engine_and_its_remedies_clear_it(tmp_path):
    dep = deployment(
        qwen3_moe_fp8(tmp_path / "q"),
        cc=(9, 0),
        n=8,
        version="0.10.0",
        options={"tensor_parallel_size": 8},
        memory=80 * GIB,
    )
    f = finding(run_checks(dep), "SP-TP-004")
    assert f.severity == "error" and f.category == "tp_divisibility"
    assert (
        "output_size of gate's and up's weight = 96 is not divisible by weight quantization "
        "block_n = 128" in f.detail
    )
    changes = [r.change for r in f.remedies]
    assert changes == ["--enable-expert-parallel", "--tensor-parallel-size 2"]
