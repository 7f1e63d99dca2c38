"""Mamba / linear-attention state per sequence and the hybrid block size, against vLLM's own
shapes (vllm/model_executor/layers/mamba/mamba_utils.py@v0.18.0 MambaStateShapeCalculator,
same @v0.16.0; model_executor/models/config.py@v0.18.0 HybridAttentionMambaModelConfig)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servepilot.checkpoint.inspect import inspect_path
from servepilot.checkpoint.spec import LayerSpec, StateSpec
from servepilot.planning import kv

ZOO = Path(__file__).resolve().parents[2] / "bench" / "zoo"


def _bytes(shapes_and_sizes) -> int:
    return sum(math.prod(shape) * size for shape, size in shapes_and_sizes)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_mamba2_state_is_conv_plus_temporal_as_vllm_shapes_it(tp):
    st = StateSpec(
        "mamba2",
        num_heads=64,
        head_dim=64,
        intermediate=4096,
        state_size=128,
        n_groups=8,
        conv_kernel=4,
    )
    groups = 8 + (0 if 8 % tp == 0 else tp - 8)
    conv = (
        (4 - 1),
        (4096 + 2 * groups * 128) // tp,
    )  # mamba2_state_shape: (conv_kernel - 1, conv_dim / tp)
    temporal = (64 // tp, 64, 128)
    want = _bytes([(conv, 2), (temporal, 4)])  # conv in the model dtype, SSM state float32 here
    assert kv.state_bytes_per_layer(LayerSpec("mamba", state=st), tp, "bfloat16", "float32") == want


def test_mamba2_with_one_group_on_four_gpus_replicates_the_group():
    st = StateSpec(
        "mamba2",
        num_heads=32,
        head_dim=64,
        intermediate=2048,
        state_size=64,
        n_groups=1,
        conv_kernel=4,
    )
    groups = 1 + (4 - 1)  # extra_groups_for_head_shards: n_groups 1 -> tp
    want = _bytes([((3, (2048 + 2 * groups * 64) // 4), 2), ((32 // 4, 64, 64), 2)])
    assert kv.state_bytes_per_layer(LayerSpec("mamba", state=st), 4, "bfloat16") == want


@pytest.mark.parametrize("tp", [1, 4])
def test_gated_delta_net_state(tp):
    st = StateSpec("gdn", num_heads=32, head_dim=128, num_k_heads=16, k_head_dim=128, conv_kernel=4)
    conv_dim = 128 * 16 * 2 + 128 * 32  # gated_delta_net_state_shape
    want = _bytes([((4 - 1, conv_dim // tp), 2), ((32 // tp, 128, 128), 2)])
    assert kv.state_bytes_per_layer(LayerSpec("linear", state=st), tp, "bfloat16") == want


def test_mamba1_state():
    st = StateSpec("mamba1", intermediate=8192, state_size=16, conv_kernel=4, dt_rank=256)
    want = _bytes([((8192 // 2, 3), 2), ((8192 // 2, 16), 2)])  # mamba1_state_shape, tp 2
    assert kv.state_bytes_per_layer(LayerSpec("mamba", state=st), 2, "bfloat16") == want


def test_nemotron_3_nano_state_and_the_raised_attention_block():
    spec = inspect_path(ZOO / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    per_layer = _bytes(
        [((3, (4096 + 2 * 8 * 128) // 8), 2), ((64 // 8, 64, 128), 4)]
    )  # ssm float32 (config)
    assert kv.state_bytes_per_sequence(spec, 8, "bfloat16") == 23 * per_layer
    # attention page per token at TP 8: 1 KV head (2 // 8 -> 1) x (128 + 128) x 2 bytes
    attn = kv.kv_bytes_per_token_per_layer(spec, 8, "auto")
    assert attn == 512
    assert kv.hybrid_block_size(16, attn, per_layer) == 16 * math.ceil(per_layer / (16 * attn))
    # KV per token counts the 6 attention layers only (was all 52 as GQA layers)
    assert kv.kv_bytes_per_token(spec, 8, "auto") == 6 * 512
    assert kv.layer_types(spec) == tuple(
        ("full" if c == "*" else "mamba")
        for c in spec.config["hybrid_override_pattern"]
        if c in "*M"
    )


def test_a_request_holds_one_state_page_per_mamba_layer():
    types = ("mamba", "mamba", "full", "mamba")
    cap = kv.capacity(
        types=types,
        window=None,
        bytes_per_token_per_layer=512,
        available_per_stage=[512 * 64 * 1000],
        block_size=64,
        max_model_len=64 * 10,
        generation="v1",
        hybrid=False,
        max_num_batched_tokens=8192,
    )
    # vLLM groups layers by kind in groups of the smallest kind's count (1 here): 3 Mamba groups
    # and 1 attention group, even without --enable-hybrid... (Mamba needs the hybrid manager)
    assert cap.groups == 4
    # per request: 10 attention blocks + 1 state page in each Mamba group
    assert cap.max_concurrency == pytest.approx(cap.num_blocks / 13)


def test_sglang_0_5_5_gives_the_mamba_pool_0_9_of_the_kv_cache(capsys):
    import json

    from servepilot.cli.main import main

    model = ZOO / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
    argv = ["plan", "--json", "--gpu", "h100x1", "--engine-version", "0.5.5", "--", "python", "-m",
            "sglang.launch_server", "--model-path", str(model)]
    main(argv)
    plan = json.loads(capsys.readouterr().out)
    budget = next(t for t in plan["terms"] if t["name"] == "kv_budget")["bytes"]
    # model_runner.py@v0.5.5: mamba / KV = mamba_full_memory_ratio (0.9) of the rest memory
    assert plan["available_kv_bytes"] == pytest.approx(budget / 1.9, rel=1e-6)
    # per request: 23 Mamba layers, conv bf16 + SSM state float32 (--mamba-ssm-dtype default)
    per_req = 23 * _bytes([((3, 4096 + 2 * 8 * 128), 2), ((64, 64, 128), 4)])
    assert any(f"x {per_req:,} B of state" in n for n in plan["notes"])


def test_lightning_linear_attention_state_is_one_square_per_head_in_the_model_dtype():
    st = StateSpec("lightning", num_heads=64, head_dim=128)
    want = _bytes([((64 // 8, 128, 128), 2)])  # linear_attention_state_shape / _dtype @v0.18.0
    assert kv.state_bytes_per_layer(LayerSpec("linear", state=st), 8, "bfloat16") == want


def test_chunked_local_attention_holds_the_chunk_plus_the_batch():
    types = ("chunked", "chunked", "chunked", "full")
    common = dict(types=types, window=8192, bytes_per_token_per_layer=1024, available_per_stage=[1 << 34],
                  block_size=16, generation="v1", hybrid=True, max_num_batched_tokens=2048)
    cap = kv.capacity(max_model_len=131072, **common)
    # per request: 3 chunked groups of cdiv(8192 + 2048, 16) blocks + the full group's 131072 / 16
    assert cap.groups == 4
    assert cap.max_concurrency == pytest.approx(cap.num_blocks / (3 * 640 + 8192))
