"""plan_deployment end to end on hand-built deployments (no GPU, no ../shared)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
from planning_builders import (  # noqa: F401
    GiB,
    MiB,
    deepseek_v3,
    deployment,
    gpt_oss,
    gpus,
    llama_70b,
    no_resolver,
    qwen2_7b,
)

from servepilot.checkpoint.spec import AttentionSpec, GGUFInfo, ModelSpec
from servepilot.errors import BadInput
from servepilot.planning import plan_deployment
from servepilot.planning.kv import cdiv

A100 = dict(name="NVIDIA A100 80GB", key="a100-80gb", mib=81920, cc=(8, 0))


def test_kv_cache_memory_bytes_sizes_the_cache_exactly():
    # Qwen2-7B, TP 2: 28 layers x 2 heads x 128 x 2 (K, V) x 2 B = 28,672 B per token per GPU
    dep = deployment(qwen2_7b(), {"tensor_parallel_size": 2, "max_model_len": 16384,
                                  "kv_cache_memory_bytes": "30G"}, gpu=gpus(2, **A100), version="0.10.1")
    plan = plan_deployment(dep)
    assert plan.bytes_per_token == 28_672
    assert plan.available_kv_bytes == 30 * GiB and plan.available_exact
    blocks = 30 * GiB // (16 * 1024) // 28
    assert plan.num_blocks == blocks and plan.kv_tokens == blocks * 16
    assert plan.max_concurrency == pytest.approx(blocks / cdiv(16384, 16))
    kv_term = next(t for t in plan.terms if t.name == "kv_budget")
    assert kv_term.exact


def test_budget_follows_utilization_and_flags_its_estimates():
    base = {"tensor_parallel_size": 2, "max_model_len": 16384}
    low = plan_deployment(deployment(qwen2_7b(), {**base, "gpu_memory_utilization": 0.5}, gpu=gpus(2, **A100)))
    high = plan_deployment(deployment(qwen2_7b(), {**base, "gpu_memory_utilization": 0.9}, gpu=gpus(2, **A100)))
    assert high.kv_tokens > low.kv_tokens
    # the extra 0.4 of the GPU goes to the KV cache, nothing else moves
    extra = high.requested_bytes - low.requested_bytes
    assert high.available_kv_bytes - low.available_kv_bytes == extra
    assert {t.name for t in low.terms if not t.exact} >= {"activation_peak", "non_torch", "weights"}
    assert all(t.uncertainty_bytes > 0 for t in low.terms if not t.exact and t.bytes)
    row = low.rows[0]
    assert row.total_bytes == row.weights_bytes + row.runtime_bytes + row.kv_bytes + row.free_bytes


def test_requested_memory_is_ceil_of_cuda_total_times_utilization():
    plan = plan_deployment(deployment(qwen2_7b(), {"gpu_memory_utilization": 0.77}, n_gpus=1))
    reserved = next(t.bytes for t in plan.terms if t.name == "driver_reserved")
    assert plan.requested_bytes == math.ceil((plan.gpu_total_bytes - reserved) * 0.77)


def test_too_long_max_model_len_gets_the_engines_suggestion():
    opts = {"tensor_parallel_size": 4, "max_model_len": 131072, "gpu_memory_utilization": 0.9}
    small = gpus(4, name="NVIDIA L40S", key="l40s", mib=46068, cc=(8, 9))
    plan = plan_deployment(deployment(llama_70b(), opts, gpu=small))
    assert plan.weights_fit and not plan.fits
    assert 0 < plan.max_model_len_fit < 131072
    assert not plan.ok
    ok = plan_deployment(deployment(llama_70b(), {**opts, "max_model_len": plan.max_model_len_fit}, gpu=small))
    assert ok.fits and ok.ok


def test_weights_over_the_gpu_leave_no_budget():
    plan = plan_deployment(deployment(llama_70b(), {"tensor_parallel_size": 1}, n_gpus=1,
                                      gpu=gpus(1, name="NVIDIA A100 80GB", key="a100", mib=81920)))
    assert not plan.weights_fit and plan.available_kv_bytes < 0 and plan.kv_tokens == 0
    assert plan.rows[0].free_bytes < 0


def test_alternatives_cover_kv_dtypes_and_asked_tp_sizes():
    dep = deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 32768})
    plan = plan_deployment(dep, tp_options=(8,))
    by = {(a.kv_cache_dtype, a.tp): a for a in plan.alternatives}
    assert set(by) == {("auto", 4), ("fp8", 4), ("auto", 8), ("fp8", 8)}
    assert by[("auto", 4)].current and not by[("fp8", 4)].current
    assert by[("fp8", 4)].bytes_per_token * 2 == by[("auto", 4)].bytes_per_token
    assert by[("fp8", 4)].kv_tokens == pytest.approx(2 * by[("auto", 4)].kv_tokens, rel=0.001)
    assert by[("auto", 8)].weights_per_gpu < by[("auto", 4)].weights_per_gpu


def test_checkpoint_kv_scheme_is_followed_and_bf16_offered():
    from servepilot.checkpoint.spec import KVCacheDeclaration

    spec = replace(deepseek_v3(),
                   kv_cache=KVCacheDeclaration(dtype="fp8_e4m3", where="config.json:quantization_config"))
    plan = plan_deployment(deployment(spec, {"tensor_parallel_size": 8}))
    assert plan.kv_cache_dtype == "fp8_e4m3" and plan.bytes_per_token == 61 * 576
    assert any("follows the checkpoint" in n for n in plan.notes)
    assert {a.kv_cache_dtype for a in plan.alternatives} == {"fp8_e4m3", "bfloat16"}


def test_explicit_dtype_and_resolution_win():
    dep = deployment(deepseek_v3(), {"tensor_parallel_size": 8, "kv_cache_dtype": "fp8"})
    resolved = SimpleNamespace(kv_cache_dtype="auto", block_size=64, non_mla_kv_forced=None)
    plan = plan_deployment(dep, resolution=resolved)
    assert plan.kv_cache_dtype == "auto" and plan.block_size == 64 and plan.kv_tokens % 64 == 0
    plan = plan_deployment(dep, resolution=resolved, kv_cache_dtype="fp8_e4m3", block_size=128)
    assert plan.kv_cache_dtype == "fp8_e4m3" and plan.block_size == 128


def test_versions_change_the_rules():
    spec = qwen2_7b()
    opts = {"tensor_parallel_size": 2, "max_model_len": 8192}
    v0 = plan_deployment(deployment(spec, opts, version="0.6.3"))
    v1 = plan_deployment(deployment(spec, opts, version="0.10.1"))
    assert (v0.generation, v1.generation) == ("v0", "v1")
    assert v0.max_num_batched_tokens == 8192  # V0 without chunked prefill: max(max_model_len, 2048)
    assert v1.max_num_batched_tokens == 8192 and v1.max_num_seqs == 1024  # H200: >= 70 GiB and not A100
    a100 = plan_deployment(deployment(spec, opts, version="0.10.1", gpu=gpus(2, **A100)))
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    # from 0.21 the CUDA graph estimate comes out of the budget, unless --enforce-eager
    new = plan_deployment(deployment(spec, opts, version="0.21.0"))
    eager = plan_deployment(deployment(spec, {**opts, "enforce_eager": True}, version="0.21.0"))
    graphs = next(t for t in new.terms if t.name == "cuda_graphs")
    assert graphs.subtracted and eager.available_kv_bytes - new.available_kv_bytes == graphs.bytes
    old_graphs = next(t for t in v1.terms if t.name == "cuda_graphs")
    assert not old_graphs.subtracted


def test_unknown_version_is_said():
    plan = plan_deployment(deployment(qwen2_7b(), {}, version=None))
    assert plan.version_assumed and any("engine version unknown" in n for n in plan.notes)


def test_sliding_window_model_reports_full_token_count_and_says_why():
    plan = plan_deployment(deployment(gpt_oss(), {"tensor_parallel_size": 2, "kv_cache_memory_bytes": 20 * GiB}))
    per_token_all_layers = 36 * 2 * 4 * 64 * 2
    assert plan.bytes_per_token == per_token_all_layers
    assert plan.kv_tokens == pytest.approx(20 * GiB / per_token_all_layers, rel=0.001)
    assert plan.kv_groups == 2 and any("sliding-window" in n for n in plan.notes)
    # 18 memory pools (one per layer of a group), each shared by a sliding and a full layer
    assert plan.rows[0].kv_bytes == plan.num_blocks * plan.page_size_bytes * 18 <= 20 * GiB


def test_measured_figures_replace_the_estimate(monkeypatch):
    import servepilot.runs.store as store

    seen = {}

    def fake_latest(model, engine, gpu_key):
        seen.update(model=model, engine=engine, gpu_key=gpu_key)
        return {"available_kv_bytes": 31 * GiB, "kv_tokens": None, "weights_bytes": 7 * GiB, "tp": 2,
                "kv_cache_dtype": None, "run_id": "r-1"}

    monkeypatch.setattr(store, "latest_measurement", fake_latest)
    # The caller (check / plan in the CLI) looks the figures up and hands them to the planner.
    dep = deployment(qwen2_7b(), {"tensor_parallel_size": 2}, gpu=gpus(2, **A100))
    plan = plan_deployment(dep, measured=store.measurement_for(dep))
    assert seen == {"model": "/models/qwen2-7b", "engine": "vllm", "gpu_key": "a100-80gb"}
    assert plan.measured["run_id"] == "r-1"
    assert plan.available_kv_bytes == 31 * GiB and plan.available_exact
    assert plan.weights_source == "measured"
    assert any("r-1" in n for n in plan.notes)
    other = deployment(qwen2_7b(), {"tensor_parallel_size": 1}, gpu=gpus(2, **A100))
    assert plan_deployment(other, measured=store.measurement_for(other)).measured is None
    assert plan_deployment(dep).measured is None  # nothing given: the planner reads no history


def test_missing_model_or_gpu_is_bad_input():
    with pytest.raises(BadInput, match="config"):
        plan_deployment(deployment(None, {}))
    with pytest.raises(BadInput, match="--gpu"):
        plan_deployment(deployment(qwen2_7b(), {}, gpu=()))


def test_summary_is_the_check_contract():
    plan = plan_deployment(deployment(qwen2_7b(), {"tensor_parallel_size": 2}))
    s = plan.summary()
    for key in ("kv_cache_dtype", "kv_tokens", "max_concurrency", "fits", "max_model_len_fit", "available_kv_bytes",
                "weights_per_gpu_bytes", "estimates", "bytes_per_token"):
        assert key in s
    assert s["kv_tokens"] == plan.kv_tokens


def test_sglang_pool_from_mem_fraction_static():
    dep = deployment(qwen2_7b(), {"tp_size": 2, "mem_fraction_static": 0.8, "context_length": 32768}, engine="sglang",
                     version="0.4.6", gpu=gpus(2, **A100))
    plan = plan_deployment(dep)
    cell = 28 * 2 * 2 * 128 * 2
    assert plan.bytes_per_token == cell
    assert plan.kv_tokens == plan.available_kv_bytes // cell
    default = plan_deployment(deployment(qwen2_7b(), {"tp_size": 2}, engine="sglang", version="0.4.6",
                                         gpu=gpus(2, **A100)))
    assert default.gpu_memory_utilization == 0.87 and any("mem-fraction-static" in n for n in default.notes)


def test_llamacpp_context_and_cache_types():
    spec = ModelSpec(path="/m/x.gguf", format="gguf", hidden_size=4096, vocab_size=128256,
                     attention=AttentionSpec(kind="gqa", num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128),
                     gguf=GGUFInfo(architecture="llama", file_size=5 * GiB, tensor_types={}, context_length=131072))
    one = gpus(1, name="NVIDIA GeForce RTX 4090", key="rtx-4090", mib=24564, cc=(8, 9))
    f16 = plan_deployment(deployment(spec, {"ctx_size": 32768, "n_gpu_layers": 99}, engine="llama.cpp", gpu=one))
    q8 = plan_deployment(deployment(spec, {"ctx_size": 32768, "n_gpu_layers": 99, "cache_type_k": "q8_0",
                                           "cache_type_v": "q8_0"}, engine="llama.cpp", gpu=one))
    assert f16.available_kv_bytes == 32768 * 32 * 2 * 8 * 128 * 2  # 4 GiB
    assert q8.available_kv_bytes == pytest.approx(f16.available_kv_bytes * 34 / 64, rel=1e-6)
    assert f16.fits and f16.kv_tokens == 32768
    huge = plan_deployment(deployment(spec, {"ctx_size": 131072 * 4, "n_gpu_layers": 99}, engine="llama.cpp", gpu=one))
    assert not huge.fits and huge.max_model_len_fit < 131072 * 4
    with pytest.raises(BadInput, match="cache type"):
        plan_deployment(deployment(spec, {"cache_type_k": "q3_weird"}, engine="llama.cpp", gpu=one))


def test_bad_option_values_are_bad_input():
    with pytest.raises(BadInput, match="kv-cache-memory-bytes"):
        plan_deployment(deployment(qwen2_7b(), {"kv_cache_memory_bytes": "lots"}))
    with pytest.raises(BadInput, match="max-model-len"):
        plan_deployment(deployment(qwen2_7b(), {"max_model_len": "long"}))


@pytest.mark.parametrize("text,value",
                         [("30G", 30 * GiB), ("30g", 30 * 10**9), ("512M", 512 * MiB), ("1.5Gi", int(1.5 * GiB)),
                                        (1234, 1234), ("1234", 1234)])
def test_human_readable_sizes(text, value):
    from servepilot.planning.options import parse_bytes

    assert parse_bytes(text, "x") == value


def test_lengths_take_k_suffixes_like_vllm():
    plan = plan_deployment(deployment(qwen2_7b(), {"max_model_len": "32k", "max_num_batched_tokens": "4K"}))
    assert (plan.max_model_len, plan.max_num_batched_tokens) == (32000, 4096)


def test_hybrid_groups_only_where_the_engine_has_them():
    opts = {"tensor_parallel_size": 2, "kv_cache_memory_bytes": 20 * GiB}
    # 0.8.5 turns sliding-window specs into full attention; 0.9.2 has the hybrid groups
    assert plan_deployment(deployment(gpt_oss(), opts, version="0.8.5")).kv_groups == 1
    assert plan_deployment(deployment(gpt_oss(), opts, version="0.9.2")).kv_groups == 2
    assert plan_deployment(deployment(gpt_oss(), {**opts, "disable_hybrid_kv_cache_manager": True})).kv_groups == 1
    assert plan_deployment(deployment(gpt_oss(), opts, version="0.10.1")).kv_groups == 2
    # a KV transfer connector turns the hybrid manager off (config.py@v0.9.2 / @v0.11.0)
    connector = {**opts, "kv_transfer_config": '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'}
    assert plan_deployment(deployment(gpt_oss(), connector, version="0.10.1")).kv_groups == 1


def test_given_kv_memory_must_still_fit_on_the_gpu():
    a100 = gpus(2, **A100)
    fine = plan_deployment(deployment(qwen2_7b(), {"tensor_parallel_size": 2,
                                                   "kv_cache_memory_bytes": "60G"}, gpu=a100))
    over = plan_deployment(deployment(qwen2_7b(), {"tensor_parallel_size": 2,
                                                   "kv_cache_memory_bytes": "78G"}, gpu=a100))
    assert fine.weights_fit and not over.weights_fit


def test_auto_fit_max_model_len_takes_the_longest_that_fits():
    small = gpus(4, name="NVIDIA L40S", key="l40s", mib=46068, cc=(8, 9))
    fixed = plan_deployment(deployment(llama_70b(), {"tensor_parallel_size": 4}, gpu=small))
    auto = plan_deployment(deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": -1}, gpu=small))
    assert not fixed.fits and fixed.max_model_len_fit
    assert auto.fits and auto.max_model_len == fixed.max_model_len_fit


def test_flashinfer_workspace_is_part_of_the_profile_peak():
    def peak(version, backend):
        res = SimpleNamespace(kv_cache_dtype="auto", block_size=16, non_mla_kv_forced=None, attention_backend=backend)
        plan = plan_deployment(deployment(qwen2_7b(), {}, version=version), resolution=res)
        return next(t.bytes for t in plan.terms if t.name == "activation_peak")

    assert peak("0.16.0", "FLASHINFER") - peak("0.16.0", "FLASH_ATTN") == 394 * MiB
    assert peak("0.10.1", "FLASHINFER") - peak("0.10.1", "FLASH_ATTN") == 256 * MiB
    assert peak("0.16.0", "FLASHINFER_MLA") - peak("0.16.0", "TRITON_MLA") == 128 * MiB
