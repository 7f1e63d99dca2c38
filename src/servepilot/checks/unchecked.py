"""What no pre-launch rule can see: facts first settled when the engine's processes start.

A PASS or WARN judges the files, flags, GPUs and release facts check can read. Some launches
also depend on what only happens at start-up (GPUs connecting to each other, ranks placed on
other nodes); their failures (NCCL / custom all-reduce set-up, Ray placement) are real and
common, and no file here decides them. They are listed so a PASS does not read as covering
them: the verdict stays what the readable facts say (exit 0), since every multi-GPU launch
has them and they are not a gap in what check was given.
"""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.unknowns import Unknown

_START = "a start of the engine on these GPUs (`servepilot launch`); `servepilot triage` reads a "
"failed start's log"


def unchecked_of(dep, resolution=None) -> list[Unknown]:
    launch = dep.launch
    ranks = sizes.tp(launch) * sizes.pp(launch) * sizes.dp(launch)
    out: list[Unknown] = []
    if ranks > 1:
        out.append(Unknown(
            "inter-GPU communication",
            f"{ranks} ranks connect at start-up (NCCL, the engine's custom all-reduce and its "
            "CUDA IPC "
            "handles, the transport NCCL picks); whether that succeeds is decided by the driver, "
            "the "
            "interconnect and the allocator settings at run time, not by anything check reads",
            _START,
        ))
    if _nodes(dep, ranks) > 1:
        out.append(Unknown(
            "node agreement",
            "ranks are placed on other nodes at start-up (Ray's view of each node's address, NCCL "
            "and "
            "gloo sockets between nodes); this host sees only its own GPUs",
            "`servepilot preflight` over the nodes (their addresses, interfaces, GPUs and versions "
            "against the plan), then a start across them",
        ))
    decides = (getattr(resolution, "extra", None) or {}).get("environment_decides")
    if decides:
        # SP-ATTN-005 names both outcomes; the one that happens is settled by the host's network
        instead = decides.get("without_cubins") or "no valid backend"
        if decides.get("error_without_cubins"):  # 0.10.2-0.11: no fallback
            instead = f"no other backend and stops ('{decides['error_without_cubins']}')"
        out.append(Unknown(
            "attention kernels on this host",
            f"{decides['backend']} runs the model's attention sinks only with FlashInfer's "
            "TRTLLM cubins, downloaded from NVIDIA's artifactory when the engine starts (or "
            f"installed with flashinfer-cubin); without them the engine takes {instead}",
            "`check --ask-engine` on the serving host, or a start of the engine there",
        ))
    flashinfer = _forced_flashinfer_package(dep)
    if flashinfer:
        out.append(flashinfer)
    return out


def _forced_flashinfer_package(dep) -> Unknown | None:
    """VLLM_ATTENTION_BACKEND=FLASHINFER on vLLM before 0.10.0: the flashinfer package is no
    requirement of those wheels (requirements-cuda.txt@v0.7.3; only the Docker image installs
    it), and vllm/attention/backends/flashinfer.py@v0.6.2 leaves its wrappers None when the
    import fails, so the host's Python decides whether the forced backend runs."""
    from servepilot.checks.old_vllm import modelled

    env = dep.launch.shell.env or {}
    if dep.engine != "vllm" or str(env.get("VLLM_ATTENTION_BACKEND", "")).upper() != "FLASHINFER":
        return None
    if not modelled(dep.engine_version):
        return None
    return Unknown(
        "attention kernels on this host",
        f"VLLM_ATTENTION_BACKEND=FLASHINFER makes vLLM {dep.engine_version} run FlashInfer, which "
        "its wheel does "
        "not install (the vllm/vllm-openai image does); without the flashinfer package the "
        "backend's wrappers "
        "are None and the first forward pass fails",
        "`python -c 'import flashinfer'` in the serving environment, or a start of the engine "
        "there",
    )


def _nodes(dep, ranks: int) -> int:
    """Nodes the launch spans: --nnodes, or more ranks than this machine has GPUs."""
    try:
        declared = int(dep.launch.get("nnodes") or 1)
    except (TypeError, ValueError):
        declared = 1
    gpus = dep.cluster.count
    spread = 2 if gpus and ranks > gpus else 1
    return max(declared, spread)
