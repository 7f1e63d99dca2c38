"""KV cache bytes per token per GPU, and what a dtype change costs: for remedy trade-offs.

Formulas from vllm/v1/kv_cache_interface.py@v0.16.0: MLA stores one latent of
kv_lora_rank + qk_rope_head_dim per token per layer and is not sharded by TP (every rank
holds it); standard attention stores K and V for max(1, kv_heads // tp) heads.
fp8_ds_mla packs 656 bytes per token per layer (512 NoPE + 16 scales + 128 RoPE).
The planner (servepilot.planning) is used instead when it gives a KV budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.checks import sizes

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1,
               "f16": 2, "q8_0": 1.0625, "q4_0": 0.5625}
FP8_DS_MLA_BYTES_PER_LAYER = 656
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vllm/config/cache.py@v0.16.0 CacheConfig.gpu_memory_utilization


def kv_bytes_per_token(spec, storage: str | None, tp: int = 1, pp: int = 1) -> int | None:
    """Bytes one token's KV takes on one GPU, or None when the geometry or dtype is unknown."""
    if spec is None or spec.attention is None or storage is None:
        return None
    a = spec.attention
    layers = a.num_layers - (a.num_sliding_layers if a.num_full_layers else 0)
    layers = -(-layers // max(pp, 1))
    if storage == "fp8_ds_mla" and spec.is_mla:
        return layers * FP8_DS_MLA_BYTES_PER_LAYER
    size = DTYPE_BYTES.get(storage)
    if size is None:
        return None
    if spec.is_mla and a.mla_head_size:
        return int(layers * a.mla_head_size * size)
    kv_heads = max(1, a.num_kv_heads // max(tp, 1))
    return int(layers * 2 * kv_heads * a.head_dim * size)


@dataclass(frozen=True)
class KvBudget:
    bytes_per_gpu: int
    estimated: bool  # True: servepilot's own estimate (weights / (tp*pp) out of util * memory)
    source: str


def kv_budget(dep, plan=None) -> KvBudget | None:
    """The KV cache memory per GPU: from the planner if it has one, else a rough estimate."""
    for attr in ("kv_budget_bytes", "kv_cache_bytes", "kv_bytes_per_gpu", "available_kv_bytes"):
        value = getattr(plan, attr, None) if plan is not None else None
        if isinstance(value, int) and value > 0:
            return KvBudget(value, False, "servepilot plan")
    mem = dep.cluster.min_memory_bytes
    spec = dep.spec
    if not mem or spec is None or spec.weights is None or not spec.weights.total_bytes:
        return None
    launch = dep.launch
    util = float(launch.get("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION)
    shards = sizes.tp(launch) * sizes.pp(launch)
    budget = int(mem * util - spec.weights.total_bytes / max(shards, 1))
    if budget <= 0:
        return None
    return KvBudget(budget, True, "estimate: gpu_memory_utilization x GPU memory - weights / (tp x pp), activations not counted")


def dtype_change_tradeoff(dep, old_storage: str, new_storage: str, plan=None) -> tuple[str, dict]:
    """Words and numbers for switching the KV cache from `old_storage` to `new_storage`."""
    launch = dep.launch
    tp, pp = sizes.tp(launch), sizes.pp(launch)
    old = kv_bytes_per_token(dep.spec, old_storage, tp, pp)
    new = kv_bytes_per_token(dep.spec, new_storage, tp, pp)
    if old is None or new is None:
        return f"KV cache stored as {new_storage} instead of {old_storage}; size change unknown (model geometry unknown)", {}
    numbers = {"kv_bytes_per_token_before": old, "kv_bytes_per_token_after": new}
    words = f"KV cache {old:,} -> {new:,} B/token per GPU ({new / old:.2f}x)"
    budget = kv_budget(dep, plan)
    if budget is not None:
        before = budget.bytes_per_gpu // old
        after = budget.bytes_per_gpu // new
        numbers.update({"kv_budget_bytes_per_gpu": budget.bytes_per_gpu, "kv_tokens_before": before,
                        "kv_tokens_after": after, "kv_tokens_lost": before - after, "budget_estimated": budget.estimated})
        pct = 100 * (before - after) / before if before else 0
        words += (f"; of a {budget.bytes_per_gpu / 2**30:.1f} GiB KV budget per GPU"
                  f"{' (estimate)' if budget.estimated else ''}: {before:,} -> {after:,} tokens"
                  f" ({before - after:,} lost, {pct:.0f}%)" if before >= after else
                  f"; of a {budget.bytes_per_gpu / 2**30:.1f} GiB KV budget per GPU: {before:,} -> {after:,} tokens")
    return words, numbers
