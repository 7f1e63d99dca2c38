"""KV geometry and capacity against vLLM's own formulas (kv_cache_interface / kv_cache_utils @v0.16.0)."""

from __future__ import annotations

import pytest
from planning_builders import GiB, deepseek_v3, gpt_oss, llama_70b, qwen2_7b

from servepilot.errors import BadInput
from servepilot.planning import kv_bytes_per_token
from servepilot.planning.kv import capacity, cdiv, kv_groups, layer_types, pp_layer_ranges


def test_mla_latent_is_not_divided_by_tp():
    spec = deepseek_v3()
    # 61 layers x (512 + 64) x 2 bytes, the same on every TP rank
    assert kv_bytes_per_token(spec, tp=1) == 61 * 576 * 2 == 70_272
    assert kv_bytes_per_token(spec, tp=8) == 70_272
    assert kv_bytes_per_token(spec, tp=8, kv_cache_dtype="fp8_e4m3") == 35_136
    assert kv_bytes_per_token(spec, tp=8, kv_cache_dtype="fp8_ds_mla") == 61 * 656


def test_gqa_heads_split_by_tp_and_replicated_past_kv_heads():
    spec = llama_70b()
    assert kv_bytes_per_token(spec, tp=1) == 80 * 2 * 8 * 128 * 2 == 327_680
    assert kv_bytes_per_token(spec, tp=8) == 327_680 // 8
    # 16 ranks, 8 KV heads: each rank still holds one whole head
    assert kv_bytes_per_token(spec, tp=16) == kv_bytes_per_token(spec, tp=8)
    assert kv_bytes_per_token(spec, tp=8, kv_cache_dtype="fp8") == 327_680 // 16


def test_unknown_kv_dtype_fails_closed():
    with pytest.raises(BadInput, match="nvfp4"):
        kv_bytes_per_token(llama_70b(), kv_cache_dtype="nvfp4")
    with pytest.raises(BadInput, match="fp8_ds_mla"):
        kv_bytes_per_token(llama_70b(), kv_cache_dtype="fp8_ds_mla")


def test_declared_but_disabled_sliding_window_is_ignored():
    assert set(layer_types(qwen2_7b())) == {"full"}


def test_groups_gpt_oss_two_groups_of_eighteen():
    groups = kv_groups(layer_types(gpt_oss()), hybrid=True)
    assert sorted(len(g) for _, g in groups) == [18, 18]
    assert {k for k, _ in groups} == {"sliding", "full"}
    assert kv_groups(layer_types(gpt_oss()), hybrid=False) == [("full", list(range(36)))]


def test_groups_five_to_one_pad_to_the_small_type():
    types = tuple("full" if (i + 1) % 6 == 0 else "sliding" for i in range(62))  # 52 sliding + 10 full
    groups = kv_groups(types, hybrid=True)
    assert len(groups) == 1 + cdiv(52, 10)
    assert max(len(g) for _, g in groups) == 10
    assert sorted(i for _, g in groups for i in g) == list(range(62))


def test_groups_nearly_equal_types_use_the_larger_count():
    types = ("sliding",) * 12 + ("full",) * 13  # gpt-oss-20b + eagle in vLLM's comment
    groups = kv_groups(types, hybrid=True)
    assert [len(g) for _, g in groups] == [12, 13]


@pytest.mark.parametrize("layers,pp", [(61, 4), (80, 3), (36, 2), (7, 7)])
def test_pp_ranges_cover_every_layer_once(layers, pp):
    ranges = pp_layer_ranges(layers, pp)
    assert [i for r in ranges for i in r] == list(range(layers))
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    if layers % pp:
        assert sizes[-1] == layers // pp  # the remainder goes to the stages before the last


def _uniform(avail, *, layers=32, bpl=1024, block=16, max_len=4096, generation="v1"):
    return capacity(types=("full",) * layers, window=None, bytes_per_token_per_layer=bpl, available_per_stage=[avail],
                    block_size=block, max_model_len=max_len, generation=generation, hybrid=True,
                    max_num_batched_tokens=2048)


def test_uniform_blocks_tokens_and_concurrency():
    avail = 10 * GiB + 12345
    cap = _uniform(avail)
    page = 16 * 1024
    assert cap.num_blocks == avail // page // 32
    assert cap.kv_tokens == cap.num_blocks * 16
    assert cap.max_concurrency == pytest.approx(cap.num_blocks / cdiv(4096, 16))
    assert cap.fits


def test_suggested_max_model_len_is_the_largest_that_fits():
    page_all_layers = 16 * 1024 * 32
    avail = 100 * page_all_layers + 5  # room for exactly 100 blocks per layer
    cap = _uniform(avail, max_len=100_000)
    assert not cap.fits
    assert cap.max_model_len_fit == 100 * 16
    assert _uniform(avail, max_len=cap.max_model_len_fit).fits
    assert not _uniform(avail, max_len=cap.max_model_len_fit + 1).fits


def test_v0_reports_blocks_times_block_size():
    cap = _uniform(3 * GiB, max_len=29_000, generation="v0")
    assert cap.max_concurrency == pytest.approx(cap.num_blocks * 16 / 29_000)
    assert cap.fits == (cap.kv_tokens >= 29_000)
    if not cap.fits:
        assert cap.max_model_len_fit == cap.kv_tokens


def test_hybrid_tokens_count_every_layer_but_requests_hold_only_the_window():
    types = layer_types(gpt_oss())
    kw = dict(window=128, bytes_per_token_per_layer=2048, available_per_stage=[40 * GiB], block_size=16,
              max_model_len=131072, max_num_batched_tokens=8192)
    hybrid = capacity(types=types, generation="v1", hybrid=True, **kw)
    flat = capacity(types=types, generation="v1", hybrid=False, **kw)
    assert hybrid.groups == 2 and flat.groups == 1
    # "GPU KV cache size" is the same figure either way (blocks // groups x block size)
    assert abs(hybrid.kv_tokens - flat.kv_tokens) <= 16
    # but a long request holds only window + batch tokens in the 18 sliding layers
    assert hybrid.max_concurrency > 1.5 * flat.max_concurrency


def test_pipeline_stage_with_most_layers_limits_the_blocks():
    even = capacity(types=("full",) * 60, window=None, bytes_per_token_per_layer=1024, available_per_stage=[GiB, GiB],
                    block_size=16, max_model_len=1024, generation="v1", hybrid=True, max_num_batched_tokens=2048)
    uneven = capacity(types=("full",) * 61, window=None, bytes_per_token_per_layer=1024, available_per_stage=[GiB, GiB],
                      block_size=16, max_model_len=1024, generation="v1", hybrid=True, max_num_batched_tokens=2048)
    assert even.num_blocks == GiB // (16 * 1024) // 30
    assert uneven.num_blocks == GiB // (16 * 1024) // 31


def test_groups_before_0_12_always_use_the_smaller_count():
    types = ("sliding",) * 12 + ("full",) * 13
    groups = kv_groups(types, hybrid=True, within_25pct=False)
    assert max(len(g) for _, g in groups) == 12 and len(groups) == 1 + cdiv(13, 12)
