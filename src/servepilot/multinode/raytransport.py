"""The preflight's Ray transport: discover the alive nodes, run one pinned probe on each,
and ask Ray whether the plan's GPU bundles can be placed, without launching anything.

Ray is an optional extra (`pip install 'servepilot[ray]'`): imported here only, lazily.
Facts measured on Ray 2.60 (servepilot research notes §4): a task pinned with
NodeAffinitySchedulingStrategy(node_id, soft=False) runs in that raylet's environment; a
node killed after discovery can stay "alive" for seconds and its task fails only ~14 s
later, so every wait here is time-boxed; `placement_group(...).wait(5)` answers feasibility.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from servepilot.errors import BadInput
from servepilot.multinode.compare import NodeProbe

PLACEMENT_WAIT_S = 5.0


@dataclass(frozen=True)
class RayNode:
    node_id: str
    address: str
    gpus: float
    is_head: bool
    resources: dict

    @property
    def short_id(self) -> str:
        return self.node_id[:12]


def _ray():
    try:
        import ray
    except ImportError:
        raise BadInput("Ray is not installed here", hint="pip install 'servepilot[ray]', or use --merge with "
                       "`servepilot probe --json` files from each node") from None
    return ray


def connect(address: str) -> None:
    """Join the cluster at `address` as a driver (no-op when this process already has)."""
    ray = _ray()
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise BadInput(f"cannot join the Ray cluster at {address}: {str(exc).splitlines()[0]}") from None


def discover() -> list[RayNode]:
    """The alive nodes: the head first, then by address, custom resources and NodeID."""
    ray = _ray()
    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = dict(n.get("Resources") or {})
        nodes.append(RayNode(n["NodeID"], n.get("NodeManagerAddress", ""), float(res.get("GPU", 0)),
                             "node:__internal_head__" in res, res))

    def key(node: RayNode):
        custom = sorted(k for k in node.resources if k not in ("CPU", "GPU", "memory", "object_store_memory")
                        and not k.startswith("node:"))
        return (not node.is_head, node.address, custom, node.node_id)

    return sorted(nodes, key=key)


def _probe_task(model, head, ports):
    """Runs on the node: the probe, stamped with the node's clock."""
    from servepilot.hardware.hostprobe import probe_host

    return probe_host(model=model, head=head, ports=tuple(ports))


def probe_nodes(nodes: list[RayNode], *, model: str | None, head: str | None, ports: tuple[int, ...],
                timeout_s: float, during=None) -> list[NodeProbe]:
    """One zero-resource probe pinned to each node; a node that does not answer within
    `timeout_s` is reported, not waited on. `during()` runs while the probes are out."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(_probe_task)
    deadline = time.monotonic() + timeout_s
    refs = {task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False))
            .remote(model, head, list(ports)): n for n in nodes}
    if during is not None:
        during()
    results: dict[str, NodeProbe] = {}
    pending = list(refs)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        got = time.time()
        for ref in ready:
            node = refs[ref]
            name = f"node{nodes.index(node)}"
            try:
                probe = ray.get(ref, timeout=0)
            except Exception as exc:  # noqa: BLE001 - any task failure means the node is not usable
                results[node.node_id] = _lost(name, node, str(exc).splitlines()[0][:300])
                continue
            # The node stamps its clock as it returns: against our receipt the error is only the
            # way back (a worker's start-up, seconds on a loaded host, happens before the stamp).
            offset = float(probe.get("time", got)) - got
            results[node.node_id] = NodeProbe(name, probe, node.node_id, node.address, node.gpus,
                                              clock_offset_s=offset)
    for ref in pending:
        node = refs[ref]
        ray.cancel(ref, force=False)
        results[node.node_id] = _lost(f"node{nodes.index(node)}", node, f"no answer within {timeout_s:.0f} s")
    return [results[n.node_id] for n in nodes]


def _lost(name: str, node: RayNode, why: str) -> NodeProbe:
    return NodeProbe(name, None, node.node_id, node.address, node.gpus, error=why)


def check_placement(world_size: int, nodes: list[RayNode], wait_s: float = PLACEMENT_WAIT_S) -> dict:
    """Would vLLM's placement group of `world_size` one-GPU bundles (PACK) be placed, and where?

    {"feasible": bool, "bundles": N, "per_node": {name: bundles} or None, "gpus": {name: GPUs}}.
    The group is removed before returning, placed or not.
    """
    _ray()  # a clear message when Ray is missing
    from ray.util.placement_group import (
        placement_group,
        placement_group_table,
        remove_placement_group,
    )

    names = {n.node_id: f"node{i}" for i, n in enumerate(nodes)}
    gpus = {names[n.node_id]: int(n.gpus) for n in nodes}
    pg = placement_group([{"GPU": 1}] * world_size, strategy="PACK")
    try:
        placed = bool(pg.wait(timeout_seconds=wait_s))
        per_node = None
        if placed:
            table = placement_group_table(pg)
            per_node = {}
            for node_id in table.get("bundles_to_node_id", {}).values():
                name = names.get(node_id, node_id[:12])
                per_node[name] = per_node.get(name, 0) + 1
    finally:
        remove_placement_group(pg)
    return {"feasible": placed, "bundles": world_size, "per_node": per_node, "gpus": gpus}
