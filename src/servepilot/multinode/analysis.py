"""One call for `check`, `plan` and `deployment` on a multi-node command set.

    a = analyze_command_set(command_files=("n0.sh", "n1.sh"), gpu="h200x8")
    a.topology.world_size, a.findings, a.head  # the head node's Deployment for the single-node rules

`--gpu NAME[xN]` describes each node. The head's Deployment sees the whole cluster's GPUs
(N per node x nodes), so the single-node rules count the deployment's GPUs, not one node's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from servepilot.deployment import Deployment
from servepilot.errors import BadInput
from servepilot.multinode import is_multinode  # noqa: F401  (re-exported)
from servepilot.multinode.commandset import CommandSet, load_command_set
from servepilot.multinode.findings import NodeFinding
from servepilot.multinode.topology import Topology, derive


@dataclass(frozen=True)
class MultiNodeAnalysis:
    command_set: CommandSet
    topology: Topology
    findings: tuple[NodeFinding, ...]
    head: Deployment  # node 0's command, on the whole cluster's GPUs
    gpus_per_node: int | None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        from servepilot.engines.cmdline import render_command
        from servepilot.jsonable import to_jsonable

        topo = self.topology
        return {
            "shape": self.command_set.shape,
            "engine": self.command_set.engine,
            "node_count": topo.node_count,
            "gpus_per_node": self.gpus_per_node,
            "world_size": topo.world_size,
            "tp": topo.tp,
            "pp": topo.pp,
            "dp": topo.dp,
            "api_nodes": list(topo.api_nodes),
            "nodes": [
                {**to_jsonable(role), "origin": node.origin, "command": render_command(node.launch)}
                for role, node in _pairs(self)
            ],
            "findings": [f.to_json() for f in self.findings],
            "notes": list(self.notes),
        }


def _pairs(a: MultiNodeAnalysis):
    cmds = a.command_set.nodes
    for role in a.topology.nodes:
        yield role, cmds[role.index] if role.index < len(cmds) else cmds[0]


def analyze_command_set(
    command: Sequence[str] | None = None,
    command_files: Sequence[str] = (),
    *,
    nodes: int | None = None,
    ray_address: str | None = None,
    gpu: str | None = None,
    engine_version: str | None = None,
) -> MultiNodeAnalysis:
    from servepilot.deployment import build_deployment
    from servepilot.hardware.catalog import cluster_from_flag
    from servepilot.multinode.consistency import check_command_set

    per_node_cluster = cluster_from_flag(gpu) if gpu else None  # a bad --gpu fails first
    cs = load_command_set(command, command_files, nodes=nodes, ray_address=ray_address, engine_version=engine_version)
    notes = list(cs.notes)
    node_gpus = None
    if ray_address and cs.shape == "ray":
        from servepilot.multinode.raytransport import connect, discover

        connect(ray_address)
        node_gpus = tuple(int(n.gpus) for n in discover() if n.gpus > 0)
        cs = replace(cs, node_count=len(node_gpus))
        notes.append(f"Ray cluster at {ray_address}: GPU nodes with {' + '.join(map(str, node_gpus))} GPUs")
    per_node = per_node_cluster.count if per_node_cluster is not None else None
    if per_node is None and not node_gpus:
        notes.append("GPUs per node unknown: pass --gpu NAME[xN] (the GPUs of each node) to check the counts")
    topo = derive(cs, per_node, node_gpus)
    findings = tuple(check_command_set(cs, topo))
    try:
        head = build_deployment(command=cs.head.text, engine_version=engine_version, probe=False)
    except BadInput as exc:
        if exc.problem != "model path does not exist":
            raise
        # The checkpoint lives on the nodes, not necessarily where the check runs (a login node).
        from servepilot.hardware.cluster import Cluster

        head = Deployment(launch=cs.head.launch, cluster=Cluster(source="none"), spec=None,
                          notes=(f"model {cs.head.launch.model} is not on this machine: not inspected "
                                 "(preflight looks for it on every node)",))
    if per_node_cluster is not None:
        total = per_node * max(1, topo.node_count)
        gpus = tuple(replace(per_node_cluster.gpus[i % per_node], index=i) for i in range(total))
        cluster = replace(per_node_cluster, gpus=gpus, topology=None,
                          notes=per_node_cluster.notes + (f"{topo.node_count} node(s) of {per_node_cluster.count} "
                                                          "GPUs",))
        head = replace(head, cluster=cluster)
    notes += topo.notes
    return MultiNodeAnalysis(cs, topo, findings, head, per_node, tuple(dict.fromkeys(notes)))
