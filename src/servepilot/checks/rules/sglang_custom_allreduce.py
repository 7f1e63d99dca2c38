"""SGLang's custom all-reduce on a pair of GeForce GPUs, which have no PCIe peer access.

The custom all-reduce is on by default for a TP group of 2, 4, 6 or 8 GPUs on one node. A PCIe
group larger than two is turned down before anything is probed; a pair is probed for peer access
through CUDA IPC, and on GeForce cards that probe (or the buffer exchange after it) can stop the
start-up with "CUDART error: peer access is not supported between these two devices" instead of
falling back to NCCL. Whether it stops or falls back depends on the driver, which check cannot
see, so this is a warning with an unknown, not an error.
"""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule
from servepilot.checks.unknowns import Unknown

KNOWLEDGE = "servepilot/engines/sglang/knowledge/builds.yaml"
ERROR = "RuntimeError: CUDART error: peer access is not supported between these two devices"
# Consumer GPUs whose drivers do not offer PCIe peer-to-peer access (the GPU name as NVML
# reports it); https://github.com/sgl-project/sglang/issues/4814 (RTX 4090)
_NO_PEER_ACCESS_NAMES = ("GeForce",)


def _probed_pair(dep, ctx):
    """(the custom_all_reduce row, the TP size) when SGLang will probe peer access between two
    GeForce GPUs without NVLink; None otherwise."""
    from servepilot.engines.sglang.release import custom_all_reduce

    opts = dep.launch.options
    version = ctx.resolution.engine_version
    if not version or opts.get("disable_custom_all_reduce") or dep.cluster.topology == "nvlink":
        return None
    try:
        if int(opts.get("nnodes") or 1) > 1:
            return None  # a group across nodes turns the custom all-reduce off first
    except (TypeError, ValueError):
        return None
    gpus = dep.cluster.gpus
    if not gpus or not all(any(n in g.name for n in _NO_PEER_ACCESS_NAMES) for g in gpus):
        return None
    if any(g.nvlink for g in gpus):
        return None
    row = custom_all_reduce(version)
    tp = sizes.tp(dep.launch)
    if row is None or tp not in row.world_sizes or tp > row.probe_max_pcie_world_size:
        return None
    return row, tp


@rule(
    "SP-NCCL-002", "nccl_distributed",
    "SGLang's custom all-reduce probes peer access that GeForce cards lack",
    facts=(
        "SGLang builds its custom all-reduce for TP groups of 2, 4, 6 or 8 GPUs on one node unless "
        "--disable-custom-all-reduce is given.",
        "More than two PCIe-only GPUs: it is disabled with a warning before any probe. Exactly "
        "two: it probes peer access through CUDA IPC (gpu_p2p_access_check) and then maps the "
        "peer's buffers.",
        "GeForce cards have no PCIe peer access; at TP 2 start-up can stop with 'CUDART error: "
        "peer access is not supported between these two devices' (issue 4814, RTX 4090).",
    ),
    sources=(KNOWLEDGE,
             "sglang/srt/distributed/device_communicators/custom_all_reduce.py@v0.4.4.post1",
             "sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py@v0.5.23",
             "https://github.com/sgl-project/sglang/issues/4814"),
    engines=("sglang",),
)
def custom_allreduce_peer_access(dep, ctx) -> list[Finding]:
    found = _probed_pair(dep, ctx)
    if found is None:
        return []
    row, tp = found
    gpu = dep.cluster.gpus[0].name
    return [Finding(
        "SP-NCCL-002", "nccl_distributed", "warning",
        f"custom all-reduce over {tp} {gpu} GPUs needs peer access they do not offer",
        f"SGLang {ctx.resolution.engine_version} probes GPU peer-to-peer access for its custom "
        f"all-reduce at TP {tp} (larger PCIe groups skip it). {gpu} cards have no PCIe peer "
        f"access; depending on the driver the probe turns the custom all-reduce off, or start-up "
        f"stops with: {ERROR}",
        (Evidence(f"TP {tp}, custom all-reduce on (no --disable-custom-all-reduce)",
                  "command line"),
         Evidence(f"{gpu}, topology {dep.cluster.topology or 'unknown'}",
                  f"cluster ({dep.cluster.source})"),
         Evidence("custom all-reduce probes peer access for a pair of PCIe GPUs", row.source)),
        (Remedy("flag", "--disable-custom-all-reduce",
                "all-reduces go through NCCL: slightly slower small all-reduces (decode)",
                {"set": {"disable_custom_all_reduce": True}, "unset": []}),),
    )]


def peer_access_unknowns(dep, ctx) -> list[Unknown]:
    if dep.engine != "sglang" or _probed_pair(dep, ctx) is None:
        return []
    return [Unknown(
        "GPU peer access",
        "whether this driver lets SGLang's peer-access probe fail cleanly on GeForce cards",
        "`nvidia-smi topo -p2p r` on the machine, or --disable-custom-all-reduce")]
