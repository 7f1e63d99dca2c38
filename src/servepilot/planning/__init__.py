"""Memory planning: per-GPU weights, runtime, KV budget and KV tokens as the engine computes them.

Public API:
    plan_deployment(dep, resolution=None, kv_cache_dtype=None, block_size=None, tp_options=())
        -> MemoryPlan
    kv_bytes_per_token(spec, tp=1, kv_cache_dtype="auto") -> int
"""

from servepilot.planning.kv import kv_bytes_per_token
from servepilot.planning.plan import Alternative, GpuRow, MemoryPlan, plan_deployment

__all__ = ["Alternative", "GpuRow", "MemoryPlan", "kv_bytes_per_token", "plan_deployment"]
