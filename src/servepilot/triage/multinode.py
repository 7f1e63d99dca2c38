"""Multi-node triage: logs of several nodes (several files, or one log whose lines carry
Ray's `(pid=..., ip=...)` prefixes) merged by time, and the failure classes of multi-node
launches found in them (servepilot research notes §3, error texts quoted from the issues).

Kept apart from the single-log triage: it reads lines, not the scanner's events, so the two
evolve independently. One cross-node signature needs the merge: a node still loading its
shards while another has finished and waits means a slow or partial checkpoint copy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from servepilot.errors import BadInput

# "(RayWorkerWrapper pid=11, ip=10.0.0.2)", "(pid=11)", "(raylet, ip=10.0.0.2)"
RAY_PREFIX = re.compile(r"^\((?=[^()]*\b(?:pid|ip)=)(?:[\w.]+[ ,]\s*)?(?:pid=(?P<pid>\d+))?,?\s*"
                        r"(?:ip=(?P<ip>[\w.:]+))?\)\s?")
# vLLM "INFO 12-03 08:00:01 [x.py:1]" (no year), Python logging "2026-12-03 08:00:01,123",
# SGLang "[2026-12-03 08:00:01]".
_STAMPS = (
    (re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d+))?"), "%Y-%m-%d %H:%M:%S"),
    (re.compile(r"\b(\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(?:[.,](\d+))?"), "%m-%d %H:%M:%S"),
)
_LOADING = re.compile(r"Loading safetensors checkpoint shards:\s+\d+% Completed \|\s*(\d+)/(\d+)")
MAX_LINES = 2_000_000


@dataclass(frozen=True)
class Signature:
    failure_class: str
    category: str
    pattern: re.Pattern
    explanation: str
    fix: str
    source: str


def _sig(klass, category, pattern, explanation, fix, source) -> Signature:
    return Signature(klass, category, re.compile(pattern), explanation, fix, source)


# One row per error text of the research notes' failure classes (§3), most frequent first.
SIGNATURES: tuple[Signature, ...] = (
    _sig("ip_nic", "nccl_distributed", r"No available node types can fulfill resource request \{'node:",
         "Ray looks for a node by the IP vLLM picked; that IP is not a Ray node's (multi-NIC host, container)",
         "VLLM_HOST_IP=<node IP> on each node and `ray start --node-ip-address=$VLLM_HOST_IP`",
         "https://github.com/vllm-project/vllm/issues/7815"),
    _sig("ip_nic", "nccl_distributed", r"Every node should have a unique IP address",
         "two nodes announce one IP, or one node announces two", "VLLM_HOST_IP per node; check `ray list nodes`",
         "https://github.com/vllm-project/vllm/issues/12670"),
    _sig("rendezvous_network", "nccl_distributed",
         r"client socket has timed out after \d+ms while trying to connect|TCPStore.*(failed|timed out)|"
         r"socketStartConnect: Connect to|Unable to connect to GCS",
         "a node cannot reach the rendezvous: wrong interface or address, or a firewall",
         "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME = the cluster NIC on all nodes; open the ports",
         "https://github.com/vllm-project/vllm/issues/14340"),
    _sig("rdma", "nccl_distributed",
         r"NET/IB : Got completion from peer|ibv_modify_qp failed|ibv_create_qp failed|NET/IB : No device found|"
         r"Failed to open libibverbs",
         "InfiniBand/RoCE is misconfigured (or absent, and NCCL fell back to sockets)",
         "NCCL_IB_HCA, NCCL_IB_GID_INDEX=3 for RoCEv2, unlimited memlock, the RDMA devices in the container",
         "https://github.com/sgl-project/sglang/issues/4857"),
    _sig("version", "node_mismatch", r"Version mismatch: The cluster was started with",
         "the nodes run different Ray/Python versions", "the same image on every node",
         "https://github.com/ray-project/ray/issues/50511"),
    _sig("gpu_topology", "nccl_distributed",
         r"local_world_size \(\d+\) must be less than or equal to the number of visible devices|"
         r"cannot be larger than the number of available GPUs|Ray does not allocate any GPUs on the driver node",
         "the parallel plan needs more GPUs on a node than it has", "TP = GPUs per node, PP = nodes",
         "https://github.com/vllm-project/vllm/pull/28873"),
    _sig("checkpoint", "node_mismatch", r"Repo id must be in the form|invalid load key|snapshot_download",
         "a node does not have the checkpoint at the path the command names",
         "the same pre-downloaded path on every node, or a shared filesystem",
         "https://github.com/vllm-project/vllm/issues/1382"),
    _sig("shm", "shm", r"System memory request exceeds memory available in /dev/shm|"
         r"object store is using /tmp instead of /dev/shm|Bus error",
         "/dev/shm is too small on a node (a container's default 64 MiB)",
         "--shm-size=16g or --ipc=host; Kubernetes: emptyDir medium: Memory at /dev/shm",
         "https://github.com/gpustack/gpustack/issues/5014"),
)


@dataclass(frozen=True)
class NodeLine:
    node: str
    number: int  # line number in its file
    time: datetime | None
    text: str


@dataclass(frozen=True)
class NodeDiagnosis:
    failure_class: str
    category: str
    node: str
    line: int
    excerpt: str
    explanation: str
    fix: str
    source: str


@dataclass(frozen=True)
class MultiNodeTriage:
    nodes: tuple[str, ...]
    lines_read: int
    root_cause: NodeDiagnosis | None
    other: tuple[NodeDiagnosis, ...] = ()
    merged_tail: tuple[str, ...] = field(default=())  # the last merged lines, "node | text"


def ray_nodes_in(path: str, limit: int = 20000) -> set[str]:
    """The distinct `ip=` of Ray's line prefixes in the first `limit` lines of a log."""
    found: set[str] = set()
    with _open(path) as f:
        for k, line in enumerate(f):
            if k >= limit:
                break
            m = RAY_PREFIX.match(line)
            if m and m.group("ip"):
                found.add(m.group("ip"))
    return found


def _open(path: str):
    try:
        return Path(path).open(encoding="utf-8", errors="replace")
    except OSError as exc:
        from servepilot.errors import unreadable_file

        raise unreadable_file(exc, "log", path) from None


def read_node_lines(paths: list[str]) -> list[NodeLine]:
    """Every file's lines, labelled by node (the file name, or the Ray prefix's ip)."""
    out: list[NodeLine] = []
    for path in paths:
        label = Path(path).name
        with _open(path) as f:
            for number, raw in enumerate(f, 1):
                if number > MAX_LINES:
                    break
                text = raw.rstrip("\n")
                node = label
                m = RAY_PREFIX.match(text)
                if m:
                    node = m.group("ip") or label
                    text = text[m.end():]
                elif len(paths) == 1:
                    node = "driver"
                out.append(NodeLine(node, number, _stamp(text), text))
    return out


def _stamp(text: str) -> datetime | None:
    for pattern, fmt in _STAMPS:
        m = pattern.search(text[:80])
        if m:
            try:
                when = datetime.strptime(f"{m.group(1)} {m.group(2)}", fmt)
            except ValueError:
                continue
            micro = int((m.group(3) or "0")[:6].ljust(6, "0"))
            return when.replace(year=when.year if "%Y" in fmt else 1900, microsecond=micro)
    return None


def merge_by_time(lines: list[NodeLine]) -> list[NodeLine]:
    """Stable merge: a line without a stamp keeps the time of the line before it on its node."""
    last: dict[str, datetime] = {}
    keyed = []
    for order, line in enumerate(lines):
        t = line.time or last.get(line.node)
        if line.time:
            last[line.node] = line.time
        keyed.append((t or datetime.min, order, line))
    keyed.sort(key=lambda x: (x[0], x[1]))
    return [x[2] for x in keyed]


def triage_nodes(paths: list[str]) -> MultiNodeTriage:
    """Merge the logs by time and find the multi-node failure class, its node and fix."""
    if not paths:
        raise BadInput("no log given")
    merged = merge_by_time(read_node_lines(paths))
    nodes = tuple(dict.fromkeys(line.node for line in merged))
    hits: list[NodeDiagnosis] = []
    for line in merged:
        for sig in SIGNATURES:
            if sig.pattern.search(line.text):
                hits.append(NodeDiagnosis(sig.failure_class, sig.category, line.node, line.number,
                                          line.text.strip()[:300], sig.explanation, sig.fix, sig.source))
                break
    straggler = _loading_straggler(merged)
    ordered = ([straggler] if straggler else []) + hits
    root = ordered[0] if ordered else None
    seen, other = set(), []
    for d in ordered[1:]:
        key = (d.failure_class, d.node)
        if key not in seen and key != (root.failure_class, root.node):
            seen.add(key)
            other.append(d)
    tail = tuple(f"{x.node} | {x.text}" for x in merged[-20:])
    return MultiNodeTriage(nodes, len(merged), root, tuple(other), tail)


def _loading_straggler(merged: list[NodeLine]) -> NodeDiagnosis | None:
    """A node whose last shard progress is below the total while another node loaded all."""
    progress: dict[str, tuple[int, int, NodeLine]] = {}
    for line in merged:
        m = _LOADING.search(line.text)
        if m:
            progress[line.node] = (int(m.group(1)), int(m.group(2)), line)
    done = [n for n, (a, b, _) in progress.items() if a == b]
    behind = [(n, a, b, ln) for n, (a, b, ln) in progress.items() if a < b]
    if not done or not behind:
        return None
    node, a, b, line = min(behind, key=lambda x: x[1] / x[2])
    return NodeDiagnosis(
        "checkpoint", "node_mismatch", node, line.number, line.text.strip()[:300],
        f"{node} stopped at {a}/{b} shards while {', '.join(done)} loaded all {b} and waited at the barrier: "
        "that node's copy of the checkpoint is slow (network storage) or partial",
        "the same pre-downloaded checkpoint on fast local disk on every node; `servepilot preflight` compares "
        "the copies", "https://github.com/sgl-project/sglang/issues/12289")
