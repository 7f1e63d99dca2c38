"""What a command set asks of the cluster: world size, ranks per node, the API node.

Rank order follows vLLM (tp fastest, then pp, then dp: planning.common.gpu_rows) and the
engines' own node split: vLLM's mp executor and SGLang give every node world/nnodes ranks;
vLLM multi-node DP gives a node data-parallel-size-local x TP x PP; Ray's PACK placement
fills one node before the next (the head's bundles first).
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.multinode.commandset import CommandSet, NodeArgs


@dataclass(frozen=True)
class NodeRole:
    index: int
    name: str
    first_rank: int  # global rank of its first GPU worker
    ranks: int  # GPU workers it runs (its local world size)
    serves_api: bool
    dp_ranks: tuple[int, ...] = ()  # data-parallel ranks it holds (DP shapes)

    @property
    def rank_range(self) -> range:
        return range(self.first_rank, self.first_rank + self.ranks)


@dataclass(frozen=True)
class Topology:
    shape: str
    tp: int
    pp: int
    dp: int
    world_size: int  # GPU workers of the whole deployment
    node_count: int
    gpus_per_node: int | None  # from --gpu (each node), or a Ray cluster's nodes
    nodes: tuple[NodeRole, ...]
    notes: tuple[str, ...] = ()
    node_gpus: tuple[int, ...] | None = None  # a Ray cluster's GPU nodes, which may differ

    @property
    def gpus_str(self) -> str:
        if self.node_gpus:
            return " + ".join(map(str, self.node_gpus)) + " GPUs"
        return f"{self.node_count} node(s) of {self.gpus_per_node} GPU(s)"

    @property
    def api_nodes(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes if n.serves_api)

    @property
    def total_gpus(self) -> int | None:
        if self.node_gpus:
            return sum(self.node_gpus)
        return None if self.gpus_per_node is None else self.gpus_per_node * self.node_count


def world_size(args: NodeArgs, engine: str) -> int:
    """GPU workers of the deployment: TP x PP x DP; SGLang's DP attention lives inside TP."""
    if engine == "sglang" and args.dp_attention:
        return args.tp * args.pp
    return args.tp * args.pp * args.dp


def derive(cs: CommandSet, gpus_per_node: int | None = None,
           node_gpus: tuple[int, ...] | None = None) -> Topology:
    """The topology of `cs`; `node_gpus` (a Ray cluster's GPUs per node) overrides the count."""
    head = cs.head.args
    world = world_size(head, cs.engine)
    notes: list[str] = []
    n = cs.node_count or (len(node_gpus) if node_gpus else 0)
    if cs.shape == "ray":
        roles = _ray_roles(world, n, gpus_per_node, node_gpus, head, notes)
    elif cs.shape == "vllm-dp":
        roles = _dp_roles(cs, head)
    elif cs.shape in ("vllm-mp", "sglang"):
        per = world // max(1, head.nnodes or n)
        roles = []
        for node in cs.nodes:
            rank = node.args.node_rank if node.args.node_rank is not None else node.index
            roles.append(NodeRole(node.index, node.name, rank * per, per,
                                  serves_api=rank == 0 and not node.args.headless))
    else:  # single, replicas, mixed: each command is its own server
        roles = [NodeRole(node.index, node.name, 0, world_size(node.args, cs.engine), serves_api=not node.args.headless)
                 for node in cs.nodes]
    return Topology(cs.shape, head.tp, head.pp, head.dp, world, n, gpus_per_node, tuple(roles), tuple(notes),
                    tuple(node_gpus) if node_gpus else None)


def _ray_roles(world: int, n: int, gpus_per_node: int | None, node_gpus, head: NodeArgs, notes: list[str]):
    if node_gpus:
        capacity = list(node_gpus)
    elif gpus_per_node:
        capacity = [gpus_per_node] * n
    else:
        per = -(-world // max(1, n))
        capacity = [per] * n
        notes.append(f"GPUs per node unknown (no --gpu): {world} workers assumed spread {per} per node")
    roles, left, rank = [], world, 0
    for k, cap in enumerate(capacity):
        take = max(0, min(cap, left))
        roles.append(NodeRole(k, f"node{k}", rank, take, serves_api=k == 0))
        rank, left = rank + take, left - take
    return roles


def _dp_roles(cs: CommandSet, head: NodeArgs) -> list[NodeRole]:
    per_replica = head.tp * head.pp
    roles, next_start = [], 0
    for node in cs.nodes:
        a = node.args
        if a.dp_rank is not None:  # external load balancing: this server is one DP rank
            local, start = 1, a.dp_rank
        else:
            local = a.dp_local if a.dp_local is not None else a.dp
            start = a.dp_start if a.dp_start is not None else (0 if node.index == 0 else next_start)
        next_start = start + local
        roles.append(NodeRole(node.index, node.name, start * per_replica, local * per_replica,
                              serves_api=not a.headless or a.dp_rank is not None,
                              dp_ranks=tuple(range(start, start + local))))
    return roles
