"""The memory plan per node: which pipeline stages (and so which layers) and how many
experts each node holds, and its GPUs' weights and KV cache, from the one planner.

The planner's rows are one per GPU worker in rank order (planning.common.gpu_rows), so a
node's rows are its rank range; its layers are the stages' ranges of planning.kv.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.multinode.analysis import MultiNodeAnalysis


@dataclass(frozen=True)
class NodeMemory:
    node: str
    ranks: int
    pp_stages: tuple[int, ...]
    layers: tuple[tuple[int, int], ...]  # [first, last] decoder layer per stage it holds
    weights_per_gpu_bytes: int
    kv_per_gpu_bytes: int
    min_free_bytes: int
    experts_per_gpu: int | None  # routed experts on each GPU with expert parallel
    experts_on_node: int | None


def plan_per_node(a: MultiNodeAnalysis, plan) -> tuple[NodeMemory, ...]:
    """Slice `plan` (planning.plan_deployment of the head) by the topology's rank ranges."""
    from servepilot.planning.kv import cdiv, pp_layer_ranges

    spec = a.head.spec
    topo = a.topology
    rows = plan.rows
    layers = spec.attention.num_layers if spec is not None and spec.attention is not None else 0
    stages = pp_layer_ranges(layers, plan.pp) if layers else []
    experts = spec.moe.num_experts if spec is not None and spec.is_moe else None
    ep_ranks = plan.tp * plan.dp if plan.expert_parallel else None
    out = []
    for role in topo.nodes:
        mine = [r for r in rows if r.index in role.rank_range] if len(rows) == topo.world_size else []
        stage_ids = tuple(sorted({r.pp_rank for r in mine}))
        per_gpu = cdiv(experts, ep_ranks) if experts and ep_ranks else None
        out.append(NodeMemory(
            node=role.name,
            ranks=role.ranks,
            pp_stages=stage_ids,
            layers=tuple((stages[s].start, stages[s].stop - 1) for s in stage_ids if s < len(stages)),
            weights_per_gpu_bytes=max((r.weights_bytes for r in mine), default=0),
            kv_per_gpu_bytes=min((r.kv_bytes for r in mine), default=0),
            min_free_bytes=min((r.free_bytes for r in mine), default=0),
            experts_per_gpu=per_gpu,
            experts_on_node=min(experts, per_gpu * role.ranks) if per_gpu else None,
        ))
    return tuple(out)
