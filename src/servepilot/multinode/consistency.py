"""Cross-node consistency of a command set: small rules in one table, each -> NodeFindings.

Every finding has category `node_mismatch`, names the nodes, and carries the release each
flag it rests on appeared in (from the engine's flag table) with the source of the rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from servepilot.multinode.commandset import CommandSet, NodeCommand
from servepilot.multinode.findings import NodeFinding, node_finding
from servepilot.multinode.topology import Topology, world_size

VLLM_MP = "https://github.com/vllm-project/vllm/pull/23691"
VLLM_DP = "vllm docs/serving/data_parallel_deployment.md; https://github.com/vllm-project/vllm/pull/15977"
VLLM_LOCAL_WORLD = "https://github.com/vllm-project/vllm/pull/28873"
VLLM_UNIQUE_IP = "https://github.com/vllm-project/vllm/issues/7815"
VLLM_RAY = "vllm docs/serving/parallelism_scaling.md"
SGLANG_MULTI = "docs.sglang.io references/multi_node_deployment/multi_node"
SGLANG_DIST_INIT = "https://github.com/sgl-project/sglang/issues/2658"
LWS = "docs.vllm.ai deployment/frameworks/lws"


def flag_fact(engine: str, flag: str) -> tuple[str, str]:
    """(fact, source): the releases servepilot's flag table has `flag` in."""
    from servepilot.engines.flagtable import load_table

    table = load_table(engine if engine != "llama.cpp" else "llamacpp")
    rows = [r for r in table.rows if r.name == flag]
    if not rows:
        return f"{flag}: not in servepilot's {engine} flag table", "servepilot flag table"
    ranges = " or ".join(table.versions_of(flag))
    return f"{flag} exists in {engine} {ranges} (sampled releases)", rows[-1].source


def _values(cs: CommandSet, get: Callable[[NodeCommand], object]) -> dict[str, object]:
    return {n.name: get(n) for n in cs.nodes}


def _odd_ones(values: dict[str, object]) -> tuple[str, ...]:
    """Nodes whose value differs from the most common one (node0's on a tie)."""
    counts = Counter(map(repr, values.values()))
    first = repr(next(iter(values.values())))
    top = max(counts.values())
    majority = first if counts[first] == top else counts.most_common(1)[0][0]
    return tuple(k for k, v in values.items() if repr(v) != majority)


def _listing(values: dict[str, object]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in values.items())


def _multi(cs: CommandSet) -> bool:
    return len(cs.nodes) > 1


def engine_and_model(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    out = []
    if not _multi(cs):
        return out
    engines = _values(cs, lambda n: n.launch.engine)
    if len(set(engines.values())) > 1:
        out.append(node_finding(
            "node.engine_mismatch", "SP-NODE-001", severity="error", nodes=_odd_ones(engines),
            title="the nodes run different engines", detail=_listing(engines),
            remedies=(("flag", "run the same engine on every node", "none"),)))
        return out
    models = _values(cs, lambda n: n.launch.model)
    if len(set(models.values())) > 1:
        out.append(node_finding(
            "node.model_mismatch", "SP-NODE-002", severity="error", nodes=_odd_ones(models),
            title="the nodes name different models",
            detail=f"{_listing(models)}. Every rank loads its share of one checkpoint; a path that differs "
                   "is a different (or missing) copy on that node.",
            evidence=(("GPUStack and Dynamo require the model at the same path on every node",
                       "docs.gpustack.ai running distributed vLLM; docs.nvidia.com/dynamo multinode-deployments"),),
            remedies=(("flag", "use the same model path on every node (a shared filesystem, or the same "
                               "pre-downloaded path)", "a shared filesystem or a copy per node"),)))
    return out


def sizes(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    if not _multi(cs) or cs.shape in ("replicas", "mixed"):
        return []
    out = []
    flags = {"vllm": ("-tp", "-pp", "-dp", "--nnodes"), "sglang": ("--tp", "--pp-size", "--dp-size", "--nnodes")}
    for label, get, flag in zip(("TP", "PP", "DP", "nnodes"),
                                (lambda n: n.args.tp, lambda n: n.args.pp, lambda n: n.args.dp,
                                 lambda n: n.args.nnodes), flags.get(cs.engine, ()), strict=False):
        values = _values(cs, get)
        if len(set(values.values())) > 1:
            out.append(node_finding(
                "node.size_mismatch", "SP-NODE-003", severity="error", nodes=_odd_ones(values),
                title=f"{label} differs between the nodes",
                detail=f"{flag}: {_listing(values)}. Every node must pass the same parallel sizes: the ranks "
                       "compute the world size from them and wait for peers that never come.",
                evidence=(("--nnodes 'Must match across all nodes' (Dynamo's SGLang guide)", SGLANG_MULTI),),
                remedies=(("flag", f"the same {flag} on every node", "none"),)))
    return out


def rendezvous(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    out = []
    if _multi(cs) and cs.shape in ("vllm-mp", "vllm-dp", "sglang"):
        from servepilot.multinode.commandset import RENDEZVOUS

        for flag in RENDEZVOUS.get(cs.engine, {}).values():
            values = _values(cs, lambda n, f=flag: n.args.rendezvous.get(f))
            present = {k: v for k, v in values.items() if v is not None}
            if present and len(set(values.values())) > 1:
                source = SGLANG_DIST_INIT if cs.engine == "sglang" else (VLLM_MP if "master" in flag else VLLM_DP)
                out.append(node_finding(
                    "node.rendezvous_mismatch", "SP-NODE-004", severity="error", nodes=_odd_ones(values),
                    title=f"{flag} differs between the nodes",
                    detail=f"{_listing(values)}. All nodes must meet at node 0's address; a node that dials "
                           "another address waits until the distributed timeout.",
                    evidence=(flag_fact(cs.engine, flag), ("'All nodes must use the same value'", source)),
                    remedies=(("flag", f"{flag} set to rank 0's address on every node", "none"),)))
    needs = {"vllm-mp": "--master-addr", "vllm-dp": "--data-parallel-address", "sglang": "--dist-init-addr"}
    flag = needs.get(cs.shape)
    if flag and _multi(cs):
        missing = tuple(n.name for n in cs.nodes if flag not in n.args.rendezvous)
        if missing:
            out.append(node_finding(
                "node.rendezvous_missing", "SP-NODE-005", severity="error", nodes=missing,
                title=f"{flag} is not given",
                detail=f"without {flag} a node meets its peers on its own loopback address: the other nodes "
                       "never join.",
                evidence=(flag_fact(cs.engine, flag),),
                remedies=(("flag", f"{flag} <node 0's cluster IP> on every node", "none"),)))
    return out


def node_ranks(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    if cs.shape not in ("vllm-mp", "sglang"):
        return []
    out = []
    n = len(cs.nodes)
    declared = _values(cs, lambda c: c.args.nnodes)
    wrong_count = tuple(k for k, v in declared.items() if v is not None and v != n)
    if wrong_count:
        out.append(node_finding(
            "node.count_mismatch", "SP-NODE-006", severity="error", nodes=wrong_count,
            title=f"--nnodes does not match the {n} node commands",
            detail=f"--nnodes: {_listing(declared)}; {n} commands were given.",
            evidence=(flag_fact(cs.engine, "--nnodes"),),
            remedies=(("flag", f"--nnodes {n} on every node, or one command per node", "none"),)))
    ranks = _values(cs, lambda c: c.args.node_rank)
    counts = Counter(r for r in ranks.values() if r is not None)
    expected = set(range(max([v for v in declared.values() if v] or [n])))
    bad = tuple(k for k, r in ranks.items() if r is None or counts[r] > 1 or r not in expected)
    if bad:
        missing = sorted(expected - set(counts))
        out.append(node_finding(
            "node.rank_invalid", "SP-NODE-007", severity="error", nodes=bad,
            title="node ranks are not exactly 0..N-1",
            detail=f"--node-rank: {_listing(ranks)}" + (f"; missing: {missing}" if missing else "")
                   + ". Two nodes with one rank both claim the same GPUs' ranks; a missing rank is waited for.",
            evidence=(flag_fact(cs.engine, "--node-rank"),),
            remedies=(("flag", "--node-rank k on the k-th node, each rank once (LWS: $(LWS_WORKER_INDEX))",
                       "none"),)))
    return out


def headless(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    if cs.engine != "vllm" or cs.shape not in ("vllm-mp", "vllm-dp"):
        return []
    out = []
    source = VLLM_MP if cs.shape == "vllm-mp" else VLLM_DP
    hybrid = any(n.args.hybrid_lb or n.args.dp_rank is not None for n in cs.nodes)  # an API server per node

    def is_first(n, role) -> bool:
        return (n.args.node_rank == 0) if cs.shape == "vllm-mp" else (role.dp_ranks[:1] == (0,))

    pairs = list(zip(cs.nodes, topo.nodes, strict=False))
    api_served = any(is_first(n, r) and not n.args.headless for n, r in pairs)
    for n, role in pairs:
        a = n.args
        first = is_first(n, role)
        if a.headless and a.hybrid_lb:
            out.append(node_finding(
                "node.headless_hybrid_lb", "SP-NODE-008", severity="error", nodes=(n.name,),
                title="--headless together with --data-parallel-hybrid-lb",
                detail="hybrid load balancing runs an API server on every node; --headless runs none.",
                evidence=(flag_fact("vllm", "--data-parallel-hybrid-lb"), flag_fact("vllm", "--headless")),
                remedies=(("flag", f"drop --headless on {n.name}", "none"),)))
        elif not a.headless and not first and not hybrid:
            out.append(node_finding(
                "node.headless_missing", "SP-NODE-009", severity="error", nodes=(n.name,),
                title=f"{n.name} is not node 0 but runs without --headless",
                detail="only node 0 serves the API; the other nodes run their workers with --headless, "
                       "else each starts an API server and engine core of its own.",
                evidence=(flag_fact("vllm", "--headless"), ("others: the same command plus --node-rank k --headless",
                                                              source)),
                remedies=(("flag", f"add --headless to {n.name}'s command", "none"),)))
        elif a.headless and first and not api_served:
            out.append(node_finding(
                "node.headless_on_api", "SP-NODE-010", severity="error", nodes=(n.name,),
                title=f"{n.name} is node 0 but runs --headless",
                detail="no node serves the API: node 0 must run without --headless.",
                evidence=(flag_fact("vllm", "--headless"),),
                remedies=(("flag", f"drop --headless on {n.name}", "none"),)))
    return out


def dp_ranks(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    if cs.shape != "vllm-dp":
        return []
    dp = cs.head.args.dp
    seen: list[int] = []
    for role in topo.nodes:
        seen += role.dp_ranks
    counts = Counter(seen)
    starts = _values(cs, lambda n: n.args.dp_start if n.args.dp_start is not None else (0 if n.index == 0 else None))
    locals_ = _values(cs, lambda n: n.args.dp_local)
    if sorted(seen) == list(range(dp)):
        return []
    bad, expected_start = [], 0
    for role in topo.nodes:  # node k must start where the local sizes before it end
        start = role.dp_ranks[0] if role.dp_ranks else expected_start
        if start != expected_start or any(d >= dp for d in role.dp_ranks):
            bad.append(role.name)
        expected_start += len(role.dp_ranks)
    if not bad:  # the starts chain, but the local sizes do not sum to --data-parallel-size
        bad = [topo.nodes[-1].name]
    missing = sorted(set(range(dp)) - set(seen))
    return [node_finding(
        "node.dp_start_rank", "SP-NODE-011", severity="error", nodes=tuple(bad),
        title="data-parallel start ranks do not add up",
        detail=f"--data-parallel-size {dp}; --data-parallel-size-local: {_listing(locals_)}; "
               f"--data-parallel-start-rank: {_listing(starts)}"
               + (f"; ranks never started: {missing}" if missing else "")
               + (f"; ranks started twice: {sorted(d for d, c in counts.items() if c > 1)}"
                  if any(c > 1 for c in counts.values()) else "")
               + ". Node k's start rank is the sum of the local sizes before it.",
        evidence=(flag_fact("vllm", "--data-parallel-start-rank"), flag_fact("vllm", "--data-parallel-size-local")),
        remedies=(("flag", "--data-parallel-start-rank = sum of the earlier nodes' --data-parallel-size-local, "
                           "and the local sizes summing to --data-parallel-size", "none"),))]


def gpu_count(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    out = []
    per_node = topo.gpus_per_node
    if cs.shape not in ("replicas", "single", "mixed") and topo.total_gpus is not None:
        if topo.world_size > topo.total_gpus:
            out.append(node_finding(
                "node.gpu_product", "SP-NODE-012", severity="error", nodes=tuple(r.name for r in topo.nodes),
                failure_class="gpu_topology",
                title=f"TP x PP x DP = {topo.world_size} GPUs, the nodes have {topo.total_gpus}",
                detail=f"TP {topo.tp} x PP {topo.pp} x DP {topo.dp} = {topo.world_size} workers on {topo.gpus_str}.",
                evidence=(("'you must use all GPUs in the cluster' / placement waits forever",
                           "https://github.com/vllm-project/vllm/issues/6938"),),
                remedies=(("flag", f"TP = GPUs per node ({per_node or min(topo.node_gpus)}), PP = number of nodes "
                                   f"({topo.node_count})", "pipeline stages add a hop per token"),
                          ("hardware", f"{topo.world_size - topo.total_gpus} more GPU(s) in the cluster", "cost"))))
        elif topo.world_size < topo.total_gpus and cs.shape == "ray":
            out.append(node_finding(
                "node.gpu_idle", "SP-NODE-013", severity="warning", nodes=(), failure_class="gpu_topology",
                title=f"{topo.total_gpus - topo.world_size} GPU(s) of the cluster stay idle",
                detail=f"TP x PP x DP = {topo.world_size} of {topo.total_gpus} GPUs.",
                remedies=(("flag", "size TP x PP to the cluster's GPUs", "none"),)))
    if per_node is not None:
        for role in topo.nodes:
            if role.ranks > per_node:
                source = VLLM_LOCAL_WORLD if cs.shape == "vllm-mp" else "NeMo-Skills issue #1059 (vLLM 0.11.1/0.11.2)"
                multi = cs.shape in ("replicas", "single")
                out.append(node_finding(
                    "node.local_world_size", "SP-NODE-014", severity="error", nodes=(role.name,),
                    failure_class="gpu_topology",
                    title=f"{role.name} runs {role.ranks} GPU workers on {per_node} GPUs",
                    detail=(f"local world size {role.ranks} > {per_node} visible devices."
                            + (" The commands set no multi-node launch (--nnodes, data-parallel flags or "
                               "Ray), so each node starts a whole engine of its own." if multi and _multi(cs) else "")),
                    evidence=((f"'local_world_size ({role.ranks}) must be less than or equal to the number of "
                               f"visible devices ({per_node})'", source),),
                    remedies=(("flag", "span the nodes: --nnodes N --node-rank k --master-addr IP (vLLM >= 0.13), "
                                       "or --distributed-executor-backend ray", "a multi-node launch"),
                              ("flag", f"-tp {per_node} -pp {-(-role.ranks // per_node)}", "pipeline stages"))))
    return out


def host_ips(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    if not _multi(cs):
        return []
    ips = {n.name: n.launch.shell.env.get("VLLM_HOST_IP") for n in cs.nodes}
    counts = Counter(v for v in ips.values() if v)
    dup = tuple(k for k, v in ips.items() if v and counts[v] > 1)
    if not dup:
        return []
    return [node_finding(
        "node.host_ip_duplicate", "SP-NODE-015", severity="error", nodes=dup, failure_class="ip_nic",
        title="two nodes set the same VLLM_HOST_IP",
        detail=f"VLLM_HOST_IP: {_listing({k: v for k, v in ips.items() if v})}. Each node must announce its own "
               "address ('Every node should have a unique IP address').",
        evidence=(("set VLLM_HOST_IP per node", VLLM_RAY), ("unique IP check", VLLM_UNIQUE_IP)),
        remedies=(("env", "VLLM_HOST_IP=<this node's cluster IP> on each node", "none"),))]


def flag_releases(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    """Flags a node's command uses that the given engine release does not have yet."""
    out = []
    by_flag: dict[str, list[str]] = {}
    for n in cs.nodes:
        for flag in n.too_new:
            by_flag.setdefault(flag.split("=")[0], []).append(n.name)
    version = cs.head.launch.engine_version
    for flag, names in by_flag.items():
        from servepilot.engines.flagtable import load_table

        fact, source = flag_fact(cs.engine, flag)
        since = " or ".join(load_table(cs.engine).versions_of(flag))
        out.append(node_finding(
            "node.flag_unavailable", "SP-NODE-016", severity="error", nodes=tuple(names),
            title=f"{cs.engine} {version} has no {flag}",
            detail=f"{flag} exists in {cs.engine} {since}; {cs.engine} {version} stops with 'unrecognized arguments'"
                   + (" (native multi-node: vllm PR #23691)" if flag in ("--nnodes", "--node-rank", "--master-addr",
                                                                        "--master-port", "-n", "-r") else ""),
            evidence=((fact, source),),
            remedies=(("upgrade", f"pip install '{cs.engine}{since.split(' or ')[-1].split(',')[0]}' on every node",
                       "an upgrade of every node's image"),
                      ("flag", "--distributed-executor-backend ray (one command on the head of a Ray cluster)",
                       "a Ray cluster"))))
    return out


def ray_dependency(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    """vLLM 0.18 stopped installing Ray (vllm PR #36170): a Ray launch needs it on every node."""
    from servepilot.engines.knowledge import release_version

    version = cs.head.launch.engine_version
    if cs.engine != "vllm" or not cs.head.args.uses_ray or not version:
        return []
    if release_version(version) < release_version("0.18.0"):
        return []
    return [node_finding(
        "node.ray_not_bundled", "SP-NODE-017", severity="info", nodes=(), failure_class="version",
        title=f"vLLM {version} does not install Ray",
        detail="from 0.18.0 Ray is no longer a default dependency of vLLM: every node needs the same Ray "
               "installed next to vLLM",
        evidence=(("Ray dropped from vLLM's default dependencies", "https://github.com/vllm-project/vllm/pull/36170"),),
        remedies=(("upgrade", "pip install ray (the same version on every node), or the native multi-node "
                              "launch (--nnodes/--node-rank)", "none"),))]


def ray_dp_span(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    """A Ray DP replica larger than a node needs VLLM_RAY_DP_PACK_STRATEGY=span."""
    a = cs.head.args
    per_node = topo.gpus_per_node or (min(topo.node_gpus) if topo.node_gpus else None)
    if cs.engine != "vllm" or a.dp_backend != "ray" or per_node is None or a.tp * a.pp <= per_node:
        return []
    if cs.head.launch.shell.env.get("VLLM_RAY_DP_PACK_STRATEGY") == "span":
        return []
    return [node_finding(
        "node.ray_dp_span", "SP-NODE-018", severity="error", nodes=(), failure_class="gpu_topology",
        title=f"a DP replica of TP x PP = {a.tp * a.pp} GPUs is larger than a node ({per_node} GPUs)",
        detail="with --data-parallel-backend ray each replica is packed on one node unless told to span nodes",
        evidence=(("VLLM_RAY_DP_PACK_STRATEGY=span when a replica spans nodes", VLLM_DP),),
        remedies=(("env", "VLLM_RAY_DP_PACK_STRATEGY=span on the command", "replicas cross the node interconnect"),
                  ("flag", f"TP x PP <= {per_node}", "smaller replicas")))]


RULES: tuple[Callable[[CommandSet, Topology], list[NodeFinding]], ...] = (
    engine_and_model, sizes, rendezvous, node_ranks, headless, dp_ranks, gpu_count, host_ips, flag_releases,
    ray_dependency, ray_dp_span,
)


def check_command_set(cs: CommandSet, topo: Topology) -> list[NodeFinding]:
    from servepilot.multinode.findings import ranked

    out: list[NodeFinding] = []
    for rule in RULES:
        out += rule(cs, topo)
    return ranked(out)


__all__ = ["RULES", "check_command_set", "flag_fact", "world_size"]
