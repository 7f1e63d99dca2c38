"""SGLang: the KV pool from mem_fraction_static (model_runner.profile_max_num_token)."""

from __future__ import annotations

from servepilot.checkpoint.spec import ModelSpec
from servepilot.hardware.cluster import Gpu
from servepilot.planning import kv as kvmod
from servepilot.planning.budget import Term
from servepilot.planning.common import (
    derived_max_model_len,
    engine_version,
    gpu_rows,
    refuse_absurd_ranks,
)
from servepilot.planning.facts import fact
from servepilot.planning.options import as_bool, as_float, as_int, option
from servepilot.planning.result import MemoryPlan
from servepilot.planning.weights import split_weights


def plan_sglang(dep, spec: ModelSpec, gpu: Gpu, *, dtype: str, block, notes: list[str], tp,
                 available_override: int | None = None, weights_override: int | None = None,
                  backend: str | None = None) -> MemoryPlan:
    launch = dep.launch
    version, assumed = engine_version(dep, "sglang")
    notes = list(notes)
    tp = tp or launch.tensor_parallel_size
    pp, dp = launch.pipeline_parallel_size, launch.data_parallel_size
    refuse_absurd_ranks(tp, pp, dp)
    ep = launch.expert_parallel
    mfs = as_float(option(launch, "mem_fraction_static"), "--mem-fraction-static")
    table = fact("sglang", "mem_fraction_static_by_tp", version)
    sources = [table.source]
    mfs_exact = mfs is not None
    if mfs is None:
        from servepilot.engines.sglang.memory import defaults

        archs = (spec.config or {}).get("architectures") or [None]
        sparse = spec.attention is not None and spec.attention.sparse
        engine_defaults = defaults(version, gpu.memory_bytes >> 20, tp=tp, pp=pp, use_mla=spec.is_mla,
                                   arch=archs[0], sparse=sparse)
        if engine_defaults is not None:
            mfs = engine_defaults.mem_fraction_static
            # SGLang lowers it further for vision towers, DP attention and speculative decoding
            mfs_exact = dp == 1
            sources = [engine_defaults.source]
            graph_bs = engine_defaults.cuda_graph_max_bs
            notes.append(f"--mem-fraction-static not given: SGLang {version} computes {mfs:g} "
                         f"for {gpu.memory_bytes >> 20} MiB at TP {tp} x PP {pp} (with its defaults "
                         f"chunked_prefill_size {engine_defaults.chunked_prefill_size}, cuda_graph_max_bs "
                         f"{graph_bs if graph_bs is not None else 'unset'})")
        else:
            mfs = next(v for t, v in table.get("table") if tp >= t)
            notes.append(f"--mem-fraction-static not given: {mfs} assumed for TP {tp} (SGLang {version}'s own rule was "
                         "not read)")
    ctx = fact("sglang", "cuda_context_bytes", version)
    reserved = fact("vllm", "driver_reserved_bytes", "0")  # one value for every version
    cuda_total = gpu.memory_bytes - int(reserved.value)
    split = split_weights(spec, tp=tp, pp=pp, dp=dp, expert_parallel=ep,
                          **_dp_attention_split(launch, spec, tp, dp, version, notes, sources))
    notes.extend(split.notes)
    w = weights_override if weights_override is not None else split.max_per_gpu
    available = int(cuda_total * mfs) - w - int(ctx.value)
    if available_override is not None:
        available = available_override
    terms = (
        Term("driver_reserved", int(reserved.value), False, int(reserved.get("uncertainty")), reserved.source,
             subtracted=False),
        Term("weights", w, split.exact or weights_override is not None, 0 if split.exact else int(w * 0.03),
             split.source),
        Term("cuda_context", int(ctx.value), False, int(ctx.get("uncertainty")), ctx.source),
        Term("kv_budget", available, available_override is not None, int(ctx.get("uncertainty")),
             f"total × mem_fraction_static ({mfs:g}{'' if mfs_exact else ', assumed'}) − weights − CUDA context"),
    )
    bpl = kvmod.kv_bytes_per_token_per_layer(spec, tp, dtype)
    # attention layers only: Mamba / linear-attention state lives in SGLang's mamba pool
    cell = kvmod.kv_bytes_per_token(spec, tp, dtype)
    if "mamba" in kvmod.layer_types(spec):
        available = _mamba_pool(launch, spec, tp, available, version, notes, sources)
    tokens = max(0, available) // cell if cell else 0
    max_model_len = as_int(option(launch, "context_length"), "--context-length") or derived_max_model_len(spec)
    runtime = int(cuda_total * (1 - mfs)) + int(reserved.value)
    rows = gpu_rows(dep, gpu, tp, pp, dp, [w] * pp, runtime, [tokens * cell] * pp)
    if assumed:
        notes.append(f"engine version unknown: SGLang {version} assumed")
    return MemoryPlan(
        engine="sglang", engine_version=version, version_assumed=assumed, generation="sglang",
        model=spec.name, gpu=gpu.name, gpu_count=max(1, dep.cluster.count), gpu_total_bytes=gpu.memory_bytes,
        tp=tp, pp=pp, dp=dp, expert_parallel=ep, kv_cache_dtype=dtype, block_size=1, max_model_len=max_model_len,
        max_num_batched_tokens=None, max_num_seqs=None, gpu_memory_utilization=mfs,
        bytes_per_token_per_layer=bpl, bytes_per_token=cell, page_size_bytes=bpl, weights_source=split.source,
        weights_exact=split.exact, terms=terms, requested_bytes=int(cuda_total * mfs), available_kv_bytes=available,
        available_exact=available_override is not None, num_blocks=tokens, kv_tokens=tokens,
        max_concurrency=tokens / max_model_len if max_model_len else 0.0, fits=tokens >= max_model_len,
        weights_fit=available > 0, max_model_len_fit=None if tokens >= max_model_len else tokens,
        longest_context=tokens, kv_groups=1, rows=rows, notes=tuple(dict.fromkeys(notes)), sources=tuple(sources),
    )


def _mamba_pool(launch, spec: ModelSpec, tp: int, available: int, version: str, notes: list[str],
                sources: list[str]) -> int:
    """The KV pool left beside SGLang's mamba pool (model_runner.py@v0.5.5
    handle_max_mamba_cache): with the radix cache on, the rest memory is split so that mamba
    state / KV cache = mamba_full_memory_ratio; with it off, the pool holds
    max_mamba_cache_size (--max-running-requests, else 512) requests."""
    pool = fact("sglang", "mamba_pool", version)
    ssm = str(option(launch, "mamba_ssm_dtype") or pool.get("ssm_dtype") or "") or None
    per_req = kvmod.state_bytes_per_sequence(spec, tp, ssm_dtype=ssm)
    if not pool.value:
        notes.append(f"Mamba / linear-attention layers: {per_req:,} B of state per request per GPU; how "
                     f"SGLang {version} sizes its mamba pool was not read (read for 0.5.5): KV pool not reduced")
        return available
    sources.append(pool.source)
    ratio = as_float(option(launch, "mamba_full_memory_ratio"), "--mamba-full-memory-ratio") or pool.get("ratio")
    requests = as_int(option(launch, "max_mamba_cache_size"), "--max-mamba-cache-size")
    if as_bool(option(launch, "disable_radix_cache")) or requests:
        requests = requests or as_int(option(launch, "max_running_requests"), "--max-running-requests") \
            or pool.get("requests_without_radix_cache")
        mamba = requests * per_req
    else:
        mamba = int(max(0, available) * ratio / (1 + ratio))
        requests = mamba // per_req if per_req else 0
    notes.append(f"mamba pool: {requests:,} requests x {per_req:,} B of state = {mamba / 2**30:.2f} GiB "
                 "per GPU, taken from the KV pool")
    return available - mamba


def _dp_attention_split(launch, spec, tp: int, dp: int, version: str, notes: list[str], sources: list[str]) -> dict:
    """split_weights arguments for --enable-dp-attention where SGLang's layout was read."""
    if not option(launch, "enable_dp_attention") or not spec.is_mla or tp <= 1:
        return {}
    try:
        row = fact("sglang", "dp_attention_weights", version)
    except KeyError:
        return {}  # a release whose DP-attention layout was not read: weights split as without it
    dp = tp if row.get("dp_forced_to_tp") else dp
    if dp <= 1 or tp % dp:
        return {}  # SGLang itself refuses these (dp-size > 1 dividing tp-size is asserted)
    attention_tp = tp // dp
    sources.append(row.source)
    forced = "sets dp_size = tp_size, so " if row.get("dp_forced_to_tp") else ""
    notes.append(f"--enable-dp-attention: SGLang {version} {forced}splits the MLA attention weights over "
                 f"tp / dp = {attention_tp} rank(s)" + (", and keeps the embedding whole on every rank"
                                                      if row.get("embedding_replicated") else ""))
    return {"attention_tp": attention_tp, "embedding_replicated": bool(row.get("embedding_replicated"))}
