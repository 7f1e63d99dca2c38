"""The probe comparator: every node's probe against the plan and against the other nodes.

One small function per failure class of the research notes (§3), in one table; each returns
NodeFindings that name the class, the node(s) and the fix. Probes are dicts of
hardware/hostprobe.py (schema servepilot.probe/1), read from files or returned by Ray tasks.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from servepilot.multinode.findings import NodeFinding, node_finding, ranked

GiB = 1 << 30
SHM_ERROR_BYTES = 1 * GiB  # Docker's default /dev/shm is 64 MiB: SIGBUS / object store on /tmp
SHM_WARN_BYTES = 16 * GiB  # the fix the issues converge on: --shm-size=16g or more
CLOCK_SKEW_S = 1.0
TROUBLESHOOTING = "vllm docs/serving/distributed_troubleshooting.md"
SCALING = "vllm docs/serving/parallelism_scaling.md"


@dataclass(frozen=True)
class NodeProbe:
    """One node's probe, or why there is none."""

    name: str  # node0, node1, ... in node order
    probe: dict | None
    node_id: str | None = None  # Ray NodeID
    address: str | None = None  # Ray NodeManagerAddress
    ray_gpus: float | None = None  # the node's GPU resource in Ray
    clock_offset_s: float | None = None  # node clock minus the driver's, mid-call
    error: str | None = None  # why the probe did not come back
    source: str | None = None  # the probe file, for --merge

    @property
    def gpu_count(self) -> int | None:
        gpus = (self.probe or {}).get("gpus", {})
        if gpus.get("count"):
            visible = gpus.get("visible_count")
            return int(visible if visible is not None else gpus["count"])
        if self.ray_gpus is not None:
            return int(self.ray_gpus)
        return 0 if self.probe else None


@dataclass(frozen=True)
class Expectation:
    """What the plan asks of the nodes."""

    model: str | None = None
    head: str | None = None  # the rendezvous host every node dials
    ports: tuple[int, ...] = ()  # head ports the nodes must reach
    listening: tuple[int, ...] = ()  # of those, ports that must already accept (Ray's GCS)
    ranks: tuple[int, ...] | None = None  # GPU workers per node, in node order


def _addresses(probe: dict) -> set[str]:
    return {a["address"] for i in probe.get("interfaces", {}).values() for a in i.get("addresses", ())}


def _alive(probes):
    return [p for p in probes if p.probe is not None]


def unreachable(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    return [node_finding(
        "node.unreachable", "SP-PRE-001", severity="error", nodes=(p.name,), failure_class="unreachable",
        title=f"{p.name} did not answer the probe",
        detail=f"{p.error or 'no probe'}" + (f" (Ray node {p.node_id[:12]} at {p.address})" if p.node_id else ""),
        evidence=(("a node killed after discovery still shows ALIVE for seconds; probes are time-boxed",
                   "servepilot research notes §4 (Ray 2.60 measurement)"),),
        remedies=(("hardware", f"bring {p.name} back (ray status; restart its raylet) or plan without it",
                   "fewer GPUs"),)) for p in probes if p.probe is None]


def ip_nic(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    out = []
    seen: dict[str, list[str]] = {}
    for p in _alive(probes):
        mine = _addresses(p.probe)
        host_ip = p.probe.get("env", {}).get("VLLM_HOST_IP")
        if host_ip:
            seen.setdefault(host_ip, []).append(p.name)
            if host_ip not in mine:
                out.append(node_finding(
                    "net.host_ip_not_local", "SP-PRE-010", severity="error", nodes=(p.name,), failure_class="ip_nic",
                    category="nccl_distributed", title=f"VLLM_HOST_IP={host_ip} is not an address of {p.name}",
                    detail=f"{p.name}'s addresses: {', '.join(sorted(mine)) or 'none'}. Ray then waits for a "
                           f"'node:{host_ip}' resource no node has.",
                    evidence=(("'No available node types can fulfill resource request {node:<ip>...}'",
                               "https://github.com/vllm-project/vllm/issues/7815"),),
                    remedies=(("env", f"VLLM_HOST_IP=<{p.name}'s cluster IP>, and ray start --node-ip-address with "
                                      "the same", "none"),)))
        if p.address and mine and p.address not in mine:
            out.append(node_finding(
                "net.ray_address_not_local", "SP-PRE-011", severity="error", nodes=(p.name,), failure_class="ip_nic",
                category="nccl_distributed", title=f"Ray knows {p.name} as {p.address}, not one of its addresses",
                detail=f"addresses: {', '.join(sorted(mine))}",
                evidence=(("check `ray list nodes` against each node's IP", TROUBLESHOOTING),),
                remedies=(("env", "ray start --node-ip-address=$VLLM_HOST_IP on that node", "none"),)))
        route = p.probe.get("route") or {}
        src = route.get("source_address")
        via = next((name for name, i in p.probe.get("interfaces", {}).items()
                    if any(a["address"] == src for a in i.get("addresses", ()))), None)
        if via and via.startswith(VIRTUAL_NICS):
            out.append(node_finding(
                "net.route_virtual_nic", "SP-PRE-015", severity="warning", nodes=(p.name,), failure_class="ip_nic",
                category="nccl_distributed", title=f"{p.name} reaches the head through {via} ({src})",
                detail="a container bridge or virtual NIC is not the cluster network; peers cannot dial it back",
                evidence=(("warn on docker0 picks; set the interface explicitly", TROUBLESHOOTING),),
                remedies=(("env", "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME = the cluster NIC, VLLM_HOST_IP = its "
                                  "address (containers: --network host)", "none"),)))
        if src and _link_local(src):
            out.append(node_finding(
                "net.route_link_local", "SP-PRE-012", severity="warning", nodes=(p.name,), failure_class="ip_nic",
                category="nccl_distributed", title=f"{p.name} reaches the head from link-local {src}",
                detail="a link-local source (169.254.x.x, fe80::) is rarely routable between nodes",
                evidence=(("'socketStartConnect: Connect to 169.254.x.x failed'", TROUBLESHOOTING),),
                remedies=(("env", "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME set to the cluster NIC", "none"),)))
    head0 = probes[0] if probes and probes[0].probe is not None else None
    if head0 is not None and exp.head and _is_ip(exp.head) and exp.head not in _addresses(head0.probe):
        out.append(node_finding(
            "net.head_not_node0", "SP-PRE-014", severity="error", nodes=(head0.name,), failure_class="ip_nic",
            category="nccl_distributed", title=f"the rendezvous address {exp.head} is not an address of {head0.name}",
            detail=f"{head0.name} (rank 0) has {', '.join(sorted(_addresses(head0.probe))) or 'no address'}; every "
                   "node dials the rendezvous address, and only rank 0 listens there",
            evidence=(("--dist-init-addr must be rank 0's IP on every node",
                       "https://github.com/sgl-project/sglang/issues/2658"),),
            remedies=(("flag", f"the rendezvous flag (--master-addr, --data-parallel-address, --dist-init-addr) = "
                               f"{head0.name}'s cluster IP on every node", "none"),)))
    for ip, names in seen.items():
        if len(names) > 1:
            out.append(node_finding(
                "net.host_ip_duplicate", "SP-PRE-013", severity="error", nodes=tuple(names), failure_class="ip_nic",
                category="nccl_distributed", title=f"{len(names)} nodes announce VLLM_HOST_IP={ip}",
                detail="'Every node should have a unique IP address'",
                evidence=(("set VLLM_HOST_IP per node", SCALING),),
                remedies=(("env", "VLLM_HOST_IP=<this node's own IP> on each node", "none"),)))
    return out


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _link_local(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_link_local
    except ValueError:
        return False


IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
VIRTUAL_NICS = ("docker", "virbr", "veth", "cni", "flannel", "br-")


def interfaces_named(value: str, interfaces: dict) -> tuple[list[str], list[str]]:
    """(missing, down) entries of an *_SOCKET_IFNAME value. NCCL reads a comma list of name
    prefixes, `=name` for an exact name and a leading `^` to exclude (nothing to check then)."""
    if value.startswith("^"):
        return [], []
    missing, down = [], []
    for entry in filter(None, (e.strip() for e in value.split(","))):
        exact = entry.startswith("=")
        name = entry[1:] if exact else entry
        hits = [i for i in interfaces if (i == name if exact else i.startswith(name))]
        if not hits:
            missing.append(entry)
        elif not any(interfaces[i].get("up") for i in hits):
            down.append(entry)
    return missing, down


def rendezvous_network(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    out = []
    for p in _alive(probes):
        env = p.probe.get("env", {})
        ifaces = p.probe.get("interfaces", {})
        for var in IFNAME_VARS:
            if not env.get(var):
                continue
            missing, down = interfaces_named(env[var], ifaces)
            for entries, check, what in ((missing, "nccl.ifname_missing", "names no interface of"),
                                         (down, "nccl.ifname_down", "names an interface that is down on")):
                if entries:
                    out.append(
                        node_finding(
                            check,
                            "SP-PRE-020" if "missing" in check else "SP-PRE-021",
                            severity="error",
                            nodes=(p.name,),
                            failure_class="rendezvous_network",
                            category="nccl_distributed",
                            title=f"{var}={env[var]} {what} {p.name}",
                            detail=f"{', '.join(entries)}: {p.name} has "
                            f"{', '.join(sorted(ifaces)) or 'no interfaces'}. "
                            "NCCL/Gloo find no socket and the rendezvous hangs until its timeout.",
                            evidence=(
                                (
                                    "set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME to the cluster NIC on all nodes",
                                    TROUBLESHOOTING,
                                ),
                                (
                                    "'The client socket has timed out after 600000ms'",
                                    "https://github.com/vllm-project/vllm/issues/14340",
                                ),
                            ),
                            remedies=(
                                (
                                    "env",
                                    f"{var}=<{p.name}'s cluster NIC, one of "
                                    f"{', '.join(i for i in sorted(ifaces) if ifaces[i].get('up') and i != 'lo')}>",
                                    "none",
                                ),
                            ),
                        )
                    )
        for r in p.probe.get("reach", ()):
            state = r.get("state")
            must_listen = r.get("port") in exp.listening
            if state == "open" or (state == "refused" and not must_listen):
                continue  # refused: the host answers; nothing listens yet before launch
            out.append(node_finding(
                "net.port_unreachable", "SP-PRE-022", severity="error", nodes=(p.name,),
                failure_class="rendezvous_network", category="nccl_distributed",
                title=f"{p.name} cannot reach {r.get('host')}:{r.get('port')} ({state})",
                detail="a timeout or no route means a firewall or a wrong address between the nodes"
                       if state != "refused" else "the port must already accept connections (Ray's GCS)",
                evidence=(("'Unable to connect to GCS ... Check firewall'",
                           "https://github.com/ray-project/ray/issues/18707"),),
                remedies=(("env", f"open TCP {r.get('port')} from {p.name} to the head, or fix the head address",
                           "none"),)))
    return out


def rdma(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    out = []
    alive = _alive(probes)
    with_ib = [p.name for p in alive if p.probe.get("infiniband")]
    for p in alive:
        devices = {d["device"]: d for d in p.probe.get("infiniband", ())}
        hca = p.probe.get("env", {}).get("NCCL_IB_HCA")
        if hca and not hca.startswith("^"):
            wanted = [e.split(":")[0].lstrip("=") for e in hca.split(",") if e.strip()]
            missing = [w for w in wanted if not any(d.startswith(w) for d in devices)]
            if missing:
                out.append(node_finding(
                    "ib.hca_missing", "SP-PRE-030", severity="error", nodes=(p.name,), failure_class="rdma",
                    category="nccl_distributed", title=f"NCCL_IB_HCA names {', '.join(missing)}, absent on {p.name}",
                    detail=f"InfiniBand devices: {', '.join(devices) or 'none'}",
                    evidence=(("'NET/IB : No device found'", "https://github.com/NVIDIA/nccl/issues/952"),),
                    remedies=(("env", f"NCCL_IB_HCA={','.join(devices) or '<a device of ibv_devices>'}", "none"),)))
        for name, d in devices.items():
            if d.get("ports") and not any(str(pt.get("state", "")).endswith("ACTIVE") for pt in d["ports"]):
                out.append(node_finding(
                    "ib.port_down", "SP-PRE-031", severity="warning", nodes=(p.name,), failure_class="rdma",
                    category="nccl_distributed", title=f"{name} on {p.name} has no ACTIVE port",
                    detail=", ".join(f"port {pt['port']}: {pt.get('state')}" for pt in d["ports"]),
                    evidence=(("NCCL falls back to NET/Socket silently",
                               "https://github.com/vllm-project/vllm/issues/6732"),),
                    remedies=(("hardware", f"bring {name}'s link up (ibstat), or exclude it with NCCL_IB_HCA",
                               "none"),)))
        memlock = p.probe.get("memlock")
        if devices and memlock not in (None, -1):
            out.append(node_finding(
                "ib.memlock", "SP-PRE-032", severity="warning", nodes=(p.name,), failure_class="rdma",
                category="nccl_distributed", title=f"ulimit -l is {memlock} bytes on {p.name}",
                detail="RDMA registers (pins) memory; a limited memlock makes ibv_create_qp/ibv_reg_mr fail",
                evidence=(("'ibv_create_qp failed'", "https://github.com/NVIDIA/nccl/issues/1129"),),
                remedies=(("env", "ulimit -l unlimited (containers: --ulimit memlock=-1 --cap-add IPC_LOCK)",
                           "none"),)))
    if with_ib and len(with_ib) < len(alive):
        without = tuple(p.name for p in alive if p.name not in with_ib)
        out.append(node_finding(
            "ib.inconsistent", "SP-PRE-033", severity="warning", nodes=without, failure_class="rdma",
            category="nccl_distributed", title="some nodes have InfiniBand devices and others none",
            detail=f"with: {', '.join(with_ib)}; without: {', '.join(without)}. NCCL then runs over sockets.",
            evidence=(("confirm '[send] via NET/IB/GDRDMA', not NET/Socket", SCALING),),
            remedies=(("hardware", "expose the HCAs to every node (--privileged or the RDMA device plugin)", "none"),)))
    return out


# package -> severity when it differs between nodes
VERSION_SEVERITY = {"python": "error", "vllm": "error", "sglang": "error", "torch": "error", "ray": "error",
                    "nvidia-nccl-cu12": "error", "nvidia-nccl-cu13": "error", "transformers": "warning",
                    "flashinfer-python": "warning", "nvidia-cuda-runtime-cu12": "warning",
                    "nvidia-cuda-runtime": "warning", "driver": "warning", "cuda_driver": "warning"}


def _majority(values: dict[str, object]) -> object:
    counts = Counter(map(repr, values.values()))
    first = next(iter(values.values()))
    if counts[repr(first)] == max(counts.values()):
        return first
    top = counts.most_common(1)[0][0]
    return next(v for v in values.values() if repr(v) == top)


def versions(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    out = []
    alive = _alive(probes)
    if len(alive) < 2:
        return out
    table: dict[str, dict[str, object]] = {}
    for p in alive:
        v = dict(p.probe.get("versions", {}))
        v["driver"] = p.probe.get("gpus", {}).get("driver_version")
        v["cuda_driver"] = p.probe.get("gpus", {}).get("cuda_driver_version")
        for pkg in VERSION_SEVERITY:
            table.setdefault(pkg, {})[p.name] = v.get(pkg)
    for pkg, values in table.items():
        known = {k: v for k, v in values.items() if v is not None}
        if pkg in ("driver", "cuda_driver") and len(known) < len(values):
            values = known  # a CPU-only head has no driver: not a mismatch
        if len(set(map(repr, values.values()))) < 2:
            continue
        ref = _majority(values)
        odd = tuple(k for k, v in values.items() if v != ref)
        out.append(node_finding(
            "version.mismatch", "SP-PRE-040", severity=VERSION_SEVERITY[pkg], nodes=odd, failure_class="version",
            title=f"{pkg} differs between the nodes",
            detail=", ".join(f"{k}: {v or 'not installed'}" for k, v in values.items()),
            evidence=(("'Version mismatch: The cluster was started with: Ray: 2.43.0 ...'",
                       "https://github.com/ray-project/ray/issues/50511"),
                      ("version mismatch across workers", "https://github.com/gpustack/gpustack/issues/2691")),
            remedies=(("upgrade", f"the same image (or {pkg}=={ref}) on every node", "a rebuild or pull"),)))
    return out


def gpu_topology(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    out = []
    if exp.ranks is not None:
        for p, need in zip(probes, exp.ranks, strict=False):
            have = p.gpu_count
            if p.probe is None or have is None or need <= have:
                continue
            out.append(node_finding(
                "gpu.count", "SP-PRE-050", severity="error", nodes=(p.name,), failure_class="gpu_topology",
                title=f"{p.name} runs {need} GPU workers but has {have} GPU(s)",
                detail=f"'local_world_size ({need}) must be less than or equal to the number of visible devices "
                       f"({have})'",
                evidence=(("hotfix for the local world size check",
                           "https://github.com/vllm-project/vllm/pull/28873"),),
                remedies=(("flag", "TP = GPUs per node, PP = nodes", "pipeline stages"),
                          ("env", "check CUDA_VISIBLE_DEVICES on that node", "none"))))
    names = {p.name: tuple(sorted({d.get("name") for d in p.probe.get("gpus", {}).get("devices", ()) if d.get("name")}))
             for p in _alive(probes)}
    names = {k: v for k, v in names.items() if v}
    if len(set(names.values())) > 1:
        ref = _majority(names)
        out.append(node_finding(
            "gpu.model_mismatch", "SP-PRE-051", severity="warning",
            nodes=tuple(k for k, v in names.items() if v != ref), failure_class="gpu_topology",
            title="the nodes have different GPU models",
            detail=", ".join(f"{k}: {'/'.join(v)}" for k, v in names.items()) + ". The slowest GPU paces every step.",
            evidence=(("GPUStack's prerequisite: the same number and model of GPUs on each node",
                       "docs.gpustack.ai 2.2 distributed vLLM"),),
            remedies=(("hardware", "nodes of one GPU model", "cost"),)))
    return out


def checkpoint(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    if not exp.model:
        return []
    out = []
    manifests = {}
    for p in _alive(probes):
        ck = p.probe.get("checkpoint") or {}
        if not ck.get("exists") or not ck.get("files"):
            out.append(node_finding(
                "checkpoint.missing", "SP-PRE-060", severity="error", nodes=(p.name,), failure_class="checkpoint",
                title=f"{exp.model} is not on {p.name}",
                detail=ck.get("error") or f"{ck.get('path') or exp.model} does not exist or holds no model files there",
                evidence=(("'The model must be downloaded on all nodes'", "docs.nvidia.com/dynamo "
                                                                          "multinode-deployments"),),
                remedies=(("hardware", f"copy or download the checkpoint to the same path on {p.name}, or use a "
                                       "shared filesystem", "disk and transfer time"),)))
            continue
        manifests[p.name] = ck["files"]
    if len(manifests) < 2:
        return out
    ref = _majority({k: sorted((n, tuple(sorted(e.items()))) for n, e in v.items()) for k, v in manifests.items()})
    ref_files = {n: dict(e) for n, e in ref}
    for name, files in manifests.items():
        missing = sorted(set(ref_files) - set(files))
        sizes = [(n, files[n]["size"], ref_files[n]["size"]) for n in sorted(set(files) & set(ref_files))
                 if files[n].get("size") != ref_files[n].get("size")]
        hashes = [n for n in sorted(set(files) & set(ref_files))
                  if files[n].get("size") == ref_files[n].get("size")
                  and {k: v for k,
                       v in files[n].items() if k != "size"} != {k: v for k, v in ref_files[n].items() if k != "size"}]
        fix = (("hardware", f"re-copy the listed files to {name} (or a shared filesystem); compare with "
                            "`servepilot probe --model PATH --json` on both nodes", "transfer time"),)
        src = (("node 1 hangs loading weights while node 0 loaded 62/62 shards",
                "https://github.com/sgl-project/sglang/issues/12289"),)
        if missing:
            out.append(node_finding(
                "checkpoint.files_missing", "SP-PRE-061", severity="error", nodes=(name,), failure_class="checkpoint",
                title=f"{len(missing)} checkpoint file(s) missing on {name}", detail=", ".join(missing[:20]),
                evidence=src, remedies=fix))
        if sizes:
            out.append(node_finding(
                "checkpoint.size_mismatch", "SP-PRE-062", severity="error", nodes=(name,), failure_class="checkpoint",
                title=f"{len(sizes)} checkpoint file(s) differ in size on {name}",
                detail="; ".join(f"{n}: {have:,} bytes, the other nodes {want:,}" for n, have, want in sizes[:20])
                       + ". A partial copy: loading stops or hangs on that node.",
                evidence=src, remedies=fix))
        if hashes:
            out.append(node_finding(
                "checkpoint.hash_mismatch", "SP-PRE-063", severity="error", nodes=(name,), failure_class="checkpoint",
                title=f"{len(hashes)} checkpoint file(s) differ in content on {name}",
                detail=", ".join(hashes[:20]) + ": config or shard headers differ (another revision or a corrupt copy)",
                evidence=src, remedies=fix))
    return out


def shm(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    out = []
    for p in _alive(probes):
        free = (p.probe.get("shm") or {}).get("free_bytes")
        if free is None or free >= SHM_WARN_BYTES:
            continue
        out.append(node_finding(
            "shm.small", "SP-PRE-070", severity="error" if free < SHM_ERROR_BYTES else "warning", nodes=(p.name,),
            failure_class="shm", category="shm", title=f"/dev/shm has {free / GiB:.2f} GiB free on {p.name}",
            detail="NCCL, Ray's object store and the engine's IPC buffers live in /dev/shm; a container's default "
                   "64 MiB ends in 'Bus error' or the object store on /tmp",
            evidence=(("'System memory request exceeds memory available in /dev/shm'",
                       "https://github.com/gpustack/gpustack/issues/5014"),),
            remedies=(("env", "docker run --shm-size=16g (or --ipc=host); Kubernetes: an emptyDir with medium: Memory "
                              "at /dev/shm", "host memory"),)))
    return out


def clock(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    out = []
    for p in _alive(probes):
        offset = p.clock_offset_s if p.clock_offset_s is not None else p.probe.get("clock_offset_s")
        if offset is not None and abs(offset) > CLOCK_SKEW_S:
            out.append(node_finding(
                "clock.skew", "SP-PRE-090", severity="info", nodes=(p.name,), failure_class="clock", category="other",
                title=f"{p.name}'s clock is {offset:+.1f} s off", detail="merged logs order that node's lines wrongly; "
                                                                         "no "
                "launch failure is known from skew (research notes §3.9)",
                remedies=(("env", "run chrony/ntpd on every node", "none"),)))
    return out


CHECKS: tuple[Callable[[Expectation, list[NodeProbe]], list[NodeFinding]], ...] = (
    unreachable, ip_nic, rendezvous_network, rdma, versions, gpu_topology, checkpoint, shm, clock,
)


def compare(exp: Expectation, probes: list[NodeProbe]) -> list[NodeFinding]:
    """Every check over every probe, ranked errors first."""
    out: list[NodeFinding] = []
    for check in CHECKS:
        out += check(exp, list(probes))
    return ranked(out)
