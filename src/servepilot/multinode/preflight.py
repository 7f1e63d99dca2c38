"""`servepilot preflight`: probe every node, compare with the plan, one report.

    report = preflight_from_files(analysis, ["node0.json", "node1.json"])
    report = preflight_on_ray(analysis, "10.0.0.1:6379", timeout_s=12)
    report.exit_code  # 1 when any node FAILs

Both paths end in `build_report`, so probe files (Slurm, ssh, an LWS init container) and
Ray give the same findings for the same probes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from servepilot.errors import BadInput
from servepilot.multinode.analysis import MultiNodeAnalysis
from servepilot.multinode.compare import Expectation, NodeProbe, compare
from servepilot.multinode.findings import NodeFinding, node_finding, ranked

SCHEMA = "servepilot.preflight/1"
DEFAULT_TIMEOUT_S = 12.0


@dataclass(frozen=True)
class NodeStatus:
    name: str
    status: str  # "PASS" | "FAIL"
    host: str | None
    address: str | None
    gpus: int | None
    ranks: int | None  # GPU workers the plan puts there
    errors: int
    warnings: int
    node_id: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class PreflightReport:
    transport: str  # "ray" | "merge"
    nodes: tuple[NodeStatus, ...]
    findings: tuple[NodeFinding, ...]
    placement: dict | None
    analysis: MultiNodeAnalysis
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def to_json(self) -> dict:
        from servepilot.jsonable import to_jsonable

        return {
            "verdict": "fail" if self.exit_code else "pass",
            "transport": self.transport,
            "nodes": to_jsonable(self.nodes),
            "findings": [f.to_json() for f in self.findings],
            "placement": self.placement,
            "plan": self.analysis.to_json(),
            "notes": list(self.notes),
        }


def expectation(a: MultiNodeAnalysis, ray_address: str | None = None, per_node_ranks: bool = True) -> Expectation:
    """The head address and ports each node must reach, the model, the workers per node."""
    head_args = a.command_set.head.args
    host, ports, listening = None, [], []
    for flag, value in head_args.rendezvous.items():
        if flag in ("--master-addr", "--data-parallel-address"):
            host = host or value
        elif flag == "--dist-init-addr":
            h, _, port = value.rpartition(":")
            host = host or (h or value)
            if port.isdigit():
                ports.append(int(port))
        elif value.isdigit():
            ports.append(int(value))
    if ray_address:
        h, _, port = ray_address.removeprefix("ray://").rpartition(":")
        host = host or h
        if port.isdigit():
            ports.append(int(port))
            listening.append(int(port))
    ranks = tuple(r.ranks for r in a.topology.nodes) if per_node_ranks else None
    return Expectation(model=a.command_set.head.launch.model, head=host, ports=tuple(dict.fromkeys(ports)),
                       listening=tuple(listening), ranks=ranks)


def load_probe_file(path: str) -> dict:
    from servepilot.errors import not_utf8, unreadable_file

    try:
        from pathlib import Path

        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(exc, "probe file", path) from None
    except OSError as exc:
        raise unreadable_file(exc, "probe file", path) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"probe file is not JSON (line {exc.lineno}: {exc.msg})", path=path) from None
    if not isinstance(data, dict) or data.get("schema") != "servepilot.probe/1":
        raise BadInput("not a servepilot probe file (schema servepilot.probe/1)",
                       hint="make one with `servepilot probe --json > nodeK.json` on each node", path=path)
    _check_probe_shape(data, path)
    return data


# The type of each section of a probe (hardware/hostprobe.py); None where a probe may leave
# it empty. The comparator reads them without further checks, so a hand-edited file or one
# from another servepilot is refused here, naming the field.
_PROBE_SECTIONS: dict[str, tuple[type, ...]] = {
    "host": (dict,), "interfaces": (dict,), "route": (dict, type(None)), "env": (dict,),
    "gpus": (dict,), "versions": (dict,), "shm": (dict, type(None)),
    "memlock": (int, type(None)), "infiniband": (list,), "checkpoint": (dict, type(None)),
    "reach": (list,), "errors": (dict,), "overridden": (list,),
}
_ITEMS_ARE_OBJECTS = ("interfaces", "infiniband", "reach")


def _check_probe_shape(data: dict, path: str) -> None:
    for key, types in _PROBE_SECTIONS.items():
        value = data.get(key)
        if key in data and not isinstance(value, types):
            raise BadInput(f"probe file field {key!r} is {type(value).__name__}, not what "
                           "`servepilot probe` writes", path=path)
        if key in _ITEMS_ARE_OBJECTS and value:
            items = value.values() if isinstance(value, dict) else value
            if not all(isinstance(item, dict) for item in items):
                raise BadInput(f"probe file field {key!r} holds an entry that is not an object", path=path)
    gpus = data.get("gpus") or {}
    devices = gpus.get("devices")
    counts = (gpus.get("count"), gpus.get("visible_count"))
    if not all(isinstance(c, (int, type(None))) for c in counts) or not (
            devices is None and "devices" not in gpus
            or isinstance(devices, list) and all(isinstance(d, dict) for d in devices)):
        raise BadInput("probe file field 'gpus' has a count or devices that `servepilot probe` "
                       "does not write", path=path)
    if not all("device" in ib for ib in data.get("infiniband") or ()):
        raise BadInput("probe file field 'infiniband' has an entry without its device", path=path)


def preflight_from_files(a: MultiNodeAnalysis, files: list[str]) -> PreflightReport:
    probes_data = [load_probe_file(f) for f in files]  # every file is read before anything is judged
    notes = []
    expected = a.topology.node_count if a.command_set.shape != "ray" else None
    if expected and len(files) != expected:
        notes.append(f"{len(files)} probe files for {expected} nodes: files are matched to nodes in order")
    probes = [NodeProbe(f"node{k}", data, source=path) for k, (path, data) in enumerate(zip(files, probes_data,
                                                                                            strict=True))]
    per_node = a.command_set.shape != "ray"
    return build_report(a, probes, "merge", expectation(a, per_node_ranks=per_node), None, notes)


def preflight_on_ray(a: MultiNodeAnalysis, address: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                     discovered=None) -> PreflightReport:
    """Probe every alive node through Ray; `discovered` (the nodes found earlier) lets a
    caller split discovery from probing, as a node can die in between."""
    from servepilot.multinode import raytransport as rt

    rt.connect(address)
    nodes = discovered if discovered is not None else rt.discover()
    if not nodes:
        raise BadInput(f"the Ray cluster at {address} has no alive node")
    exp = expectation(a, ray_address=address, per_node_ranks=a.command_set.shape != "ray")
    placement: dict = {}

    def place():
        if a.command_set.shape == "ray":
            placement.update(rt.check_placement(a.topology.world_size, nodes))

    probes = rt.probe_nodes(nodes, model=exp.model, head=exp.head, ports=exp.ports, timeout_s=timeout_s, during=place)
    notes = [f"Ray cluster at {address}: {len(nodes)} alive node(s)"]
    if a.command_set.shape != "ray":
        notes.append("node commands matched to Ray's nodes in order (the head first, then by address): "
                     "use --merge with per-node probe files where that order is not the node ranks'")
    return build_report(a, probes, "ray", exp, placement or None, notes)


def placement_findings(placement: dict | None) -> list[NodeFinding]:
    if not placement or placement.get("feasible"):
        return []
    gpus = placement["gpus"]
    have = sum(gpus.values())
    counts = " + ".join(f"{k}: {v}" for k, v in gpus.items() if v) or "no GPUs"
    return [node_finding(
        "placement.infeasible", "SP-PRE-080", severity="error", nodes=tuple(k for k, v in gpus.items() if v),
        failure_class="placement", title=f"{placement['bundles']} GPU bundles cannot be placed on {have} GPUs",
        detail=f"per node: {counts}. vLLM would wait at 'Waiting for creating a placement group of specs' forever.",
        evidence=(("placement_group([{'GPU': 1}] * N, 'PACK').wait(5) returned False", "Ray placement groups"),
                  ("'Error: No available node types can fulfill resource request'",
                   "https://github.com/vllm-project/vllm/issues/12670")),
        remedies=(("flag", f"TP x PP <= {have}", "a smaller plan"),
                  ("hardware", f"add {placement['bundles'] - have} GPU(s) to the cluster", "cost")))]


def build_report(a: MultiNodeAnalysis, probes: list[NodeProbe], transport: str, exp: Expectation,
                 placement: dict | None, notes: list[str]) -> PreflightReport:
    findings = ranked(compare(exp, probes) + placement_findings(placement))
    rows = []
    for k, p in enumerate(probes):
        mine = [f for f in findings if p.name in f.nodes]
        errors = sum(f.severity == "error" for f in mine)
        host = (p.probe or {}).get("host", {}).get("hostname")
        ranks = exp.ranks[k] if exp.ranks is not None and k < len(exp.ranks) else None
        if placement and placement.get("per_node") is not None:
            ranks = placement["per_node"].get(p.name, 0)
        rows.append(NodeStatus(p.name, "FAIL" if errors else "PASS", host, p.address, p.gpu_count, ranks, errors,
                               sum(f.severity == "warning" for f in mine), p.node_id, p.source))
    return PreflightReport(transport, tuple(rows), tuple(findings), placement, a, tuple(notes) + a.notes)
