"""vLLM 0.20.0's FlashInfer TRTLLM BF16 MoE on Blackwell: whole 128-wide expert blocks per rank."""

from __future__ import annotations

import json

import pytest
from checkfixtures import GIB, codes, deployment, finding, qwen3_30b_a3b_config

from servepilot.checks import run_checks


def qwen3_moe_like(root, *, moe_intermediate=768, norm_topk_prob=True, quant=None):
    """Qwen3-30B-A3B's shapes (config.json of Qwen/Qwen3-30B-A3B)."""
    root.mkdir(parents=True, exist_ok=True)
    config = qwen3_30b_a3b_config(moe_intermediate, norm_topk_prob=norm_topk_prob, hidden_act="silu")
    if quant:
        config["quantization_config"] = quant
    (root / "config.json").write_text(json.dumps(config))
    return root


@pytest.mark.parametrize(
    "version, cc, tp, refused",
    [
        ("0.20.0", (10, 0), 8, True),  # 768 / 8 = 96 columns per rank
        ("0.20.0", (10, 0), 4, True),  # 192: not a multiple of 128 either
        ("0.20.0", (10, 0), 2, False),  # 384 = 3 blocks
        ("0.20.0", (9, 0), 8, False),  # Hopper: not this kernel
        ("0.19.0", (10, 0), 8, False),  # TRTLLM BF16 MoE only when asked for there
    ],
)
def test_expert_slices_must_be_whole_blocks(tmp_path, version, cc, tp, refused):
    dep = deployment(qwen3_moe_like(tmp_path / "m"), cc=cc, n=tp, version=version, memory=180 * GIB)
    result = run_checks(dep)
    assert ("SP-MOE-001" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-MOE-001")
        assert f.category == "tp_divisibility" and f.severity == "error"
        assert "K must be divisible by blockK" in f.detail


def test_the_kernel_is_not_taken_when_turned_off_or_routing_differs(tmp_path):
    off = deployment(
        qwen3_moe_like(tmp_path / "a"),
        cc=(10, 0),
        n=8,
        version="0.20.0",
        memory=180 * GIB,
        env={"VLLM_USE_FLASHINFER_MOE_FP16": "0"},
    )
    assert "SP-MOE-001" not in codes(run_checks(off))
    default_routing = deployment(
        qwen3_moe_like(tmp_path / "b", norm_topk_prob=False),
        cc=(10, 0),
        n=8,
        version="0.20.0",
        memory=180 * GIB,
    )
    assert "SP-MOE-001" not in codes(run_checks(default_routing))


def test_expert_parallel_keeps_whole_experts(tmp_path):
    dep = deployment(
        qwen3_moe_like(tmp_path / "m"),
        cc=(10, 0),
        n=8,
        version="0.20.0",
        memory=180 * GIB,
        options={"enable_expert_parallel": True},
    )
    assert "SP-MOE-001" not in codes(run_checks(dep))  # 768 = 6 blocks on each rank


@pytest.mark.parametrize(
    "options, refused",
    [
        ({}, True),  # 704 = 5.5 blocks on each rank
        ({"enable_eplb": True}, False),  # _supports_parallel_config refuses EPLB
        ({"data_parallel_size": 2, "all2all_backend": "deepep_low_latency"}, False),
        ({"data_parallel_size": 2, "all2all_backend": "allgather_reducescatter"}, True),
        ({"data_parallel_size": 2}, False),  # 0.20.0's default backend not read: no claim
    ],
)
def test_parallel_setups_the_kernel_refuses(tmp_path, options, refused):
    dep = deployment(
        qwen3_moe_like(tmp_path / "m", moe_intermediate=704),
        cc=(10, 0),
        n=4,
        version="0.20.0",
        memory=180 * GIB,
        options={"enable_expert_parallel": True, **options},
    )
    assert ("SP-MOE-001" in codes(run_checks(dep))) is refused
