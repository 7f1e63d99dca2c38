"""KV cache bytes per token per GPU, and what a dtype change costs: for remedy trade-offs.

The bytes per token come from planning/kv.py (vllm/v1/kv_cache_interface.py@v0.16.0), the one
place that formula lives. The planner (servepilot.planning) gives the KV budget when it can.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.checks import sizes

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vllm/config/cache.py@v0.16.0 CacheConfig.gpu_memory_utilization


def kv_bytes_per_token(spec, storage: str | None, tp: int = 1, pp: int = 1) -> int | None:
    """Bytes one token's KV takes on one GPU (planning/kv.py, the one formula), or None when
    the geometry or the dtype is unknown."""
    from servepilot.errors import BadInput
    from servepilot.planning.kv import kv_bytes_per_token as planned

    if spec is None or spec.attention is None or storage is None:
        return None
    try:
        return planned(spec, tp=tp, kv_cache_dtype=storage, pp=pp)
    except BadInput:
        return None


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
    return KvBudget(budget, True, "estimate: gpu_memory_utilization x GPU memory - weights / (tp x pp), activations "
                                  "not counted")


def dtype_change_tradeoff(dep, old_storage: str, new_storage: str, plan=None) -> tuple[str, dict]:
    """Words and numbers for switching the KV cache from `old_storage` to `new_storage`."""
    launch = dep.launch
    tp, pp = sizes.tp(launch), sizes.pp(launch)
    old = kv_bytes_per_token(dep.spec, old_storage, tp, pp)
    new = kv_bytes_per_token(dep.spec, new_storage, tp, pp)
    if old is None or new is None:
        return (f"KV cache stored as {new_storage} instead of {old_storage}; "
                "size change unknown (model geometry unknown)"), {}
    numbers = {"kv_bytes_per_token_before": old, "kv_bytes_per_token_after": new}
    words = f"KV cache {old:,} -> {new:,} B/token per GPU ({new / old:.2f}x)"
    budget = kv_budget(dep, plan)
    if budget is not None:
        before = budget.bytes_per_gpu // old
        after = budget.bytes_per_gpu // new
        numbers.update({"kv_budget_bytes_per_gpu": budget.bytes_per_gpu, "kv_tokens_before": before,
                        "kv_tokens_after": after, "kv_tokens_lost": before - after,
                        "budget_estimated": budget.estimated})
        pct = 100 * (before - after) / before if before else 0
        words += (f"; of a {budget.bytes_per_gpu / 2**30:.1f} GiB KV budget per GPU"
                  f"{' (estimate)' if budget.estimated else ''}: {before:,} -> {after:,} tokens"
                  f" ({before - after:,} lost, {pct:.0f}%)" if before >= after else
                  f"; of a {budget.bytes_per_gpu / 2**30:.1f} GiB KV budget per GPU: {before:,} -> {after:,} tokens")
    return words, numbers
