"""NodeFinding: a Finding (DESIGN.md contract) about some nodes of a deployment.

`check` is a stable dotted id ("checkpoint.size_mismatch", "node.rank_invalid") that tests
and tools key on; `failure_class` names the class of the multi-node research notes (§3)
the finding belongs to; `nodes` are the node names it is about.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.checks.finding import Evidence, Finding, Remedy

# The failure classes of multi-node launches, most frequent x costly first (research notes §3).
FAILURE_CLASSES = (
    "ip_nic",  # wrong IP or NIC chosen
    "rendezvous_network",  # NCCL/Gloo interface, port or firewall at rendezvous
    "rdma",  # InfiniBand/RoCE misconfiguration
    "version",  # versions differ across nodes
    "gpu_topology",  # GPU count or topology against the parallel plan
    "checkpoint",  # checkpoint missing, different or partial on a node
    "shm",  # /dev/shm too small
    "engine_bug",  # known-bad engine/Ray combination
    "clock",  # clock skew (info only)
    "unreachable",  # a node that did not answer
    "placement",  # the plan's GPU bundles cannot be placed
    "command_set",  # the per-node commands disagree
)
_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class NodeFinding:
    check: str
    finding: Finding
    nodes: tuple[str, ...] = ()
    failure_class: str = "command_set"

    @property
    def severity(self) -> str:
        return self.finding.severity

    def to_json(self) -> dict:
        from servepilot.jsonable import to_jsonable

        out = {"check": self.check, "failure_class": self.failure_class, "nodes": list(self.nodes)}
        out.update(to_jsonable(self.finding))
        return out


def node_finding(check: str, code: str, *, severity: str, title: str, detail: str, nodes=(),
                 failure_class: str = "command_set", category: str = "node_mismatch",
                 evidence: tuple[tuple[str, str], ...] = (), remedies: tuple[tuple[str, str, str], ...] = ()
                 ) -> NodeFinding:
    """A NodeFinding from plain tuples: evidence (fact, source), remedies (kind, change, trade-off)."""
    finding = Finding(code=code, category=category, severity=severity, title=title, detail=detail,
                      evidence=tuple(Evidence(f, s) for f, s in evidence),
                      remedies=tuple(Remedy(k, c, t) for k, c, t in remedies))
    return NodeFinding(check, finding, tuple(nodes), failure_class)


def ranked(findings) -> list[NodeFinding]:
    """Errors first, then by failure class frequency, then by node."""
    order = {c: i for i, c in enumerate(FAILURE_CLASSES)}
    return sorted(findings, key=lambda f: (_SEVERITY_RANK[f.severity], order.get(f.failure_class, 99), f.nodes))
