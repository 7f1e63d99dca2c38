"""The machine: GPUs, the installed torch, shared memory, NCCL settings, the port."""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule

DOCKER_DEFAULT_SHM = 64 * 2**20  # Docker's default --shm-size
# NCCL keeps per-peer buffers in /dev/shm; vLLM's docs ask for --ipc=host or --shm-size >= 1g
# (docs/deployment/docker.md) for tensor parallel inference.
MIN_SHM_FOR_TP = 1 * 2**30


@rule(
    "SP-PORT-001", "port_in_use", "The server port is already taken",
    facts=("The API server binds --port (default 8000) at start-up; a listener already there makes it fail with "
           "'Address already in use' after the model has loaded.",),
    sources=("vllm/entrypoints/openai/api_server.py@v0.16.0 (create_server_socket)",), platforms=ANY_PLATFORM,
)
def port_in_use(dep, ctx) -> list[Finding]:
    facts = dep.host  # probed once into the deployment, whatever the source of the GPU facts
    if facts is None or facts.port is None or not facts.port_busy:
        return []
    port, where = facts.port, facts.port_host
    how = "a TCP connect succeeded" if facts.port_listener else "binding it failed with EADDRINUSE"
    return [Finding("SP-PORT-001", "port_in_use", "error", f"port {port} is already in use",
                    f"Something already listens on {where}:{port} on this machine; the engine would load "
                    "the model and then fail to bind.",
                    (Evidence(f"{where}:{port}: {how}", facts.source),),
                    (Remedy("flag", f"--port {port + 1}", "clients must use the new port",
                            {"set": {"port": port + 1}, "unset": []}),))]


@rule(
    "SP-SHM-001", "shm", "/dev/shm too small for tensor parallel",
    facts=("NCCL and vLLM's multiprocessing use /dev/shm; Docker's default 64 MB makes NCCL fail ('Error while "
           "creating shared memory segment') with TP > 1.",),
    sources=("https://docs.vllm.ai/en/stable/deployment/docker.html (--ipc=host or --shm-size)",
             "https://github.com/NVIDIA/nccl/issues/290"), platforms=ANY_PLATFORM,
)
def shm_too_small(dep, ctx) -> list[Finding]:
    shm = dep.cluster.shm_bytes
    ranks = sizes.tp(dep.launch) * sizes.pp(dep.launch)
    if shm is None or ranks <= 1 or shm >= MIN_SHM_FOR_TP:
        return []
    severity = "error" if shm <= DOCKER_DEFAULT_SHM else "warning"
    return [Finding("SP-SHM-001", "shm", severity, f"/dev/shm is {shm / 2**20:.0f} MiB for {ranks} ranks",
                    f"With {ranks} GPU ranks NCCL needs shared memory segments in /dev/shm; {shm / 2**20:.0f} MiB "
                    "(Docker's default is 64 MiB) is too small and NCCL init fails.",
                    (Evidence(f"/dev/shm size {shm} bytes", "local probe (statvfs /dev/shm)"),),
                    (Remedy("hardware", "run the container with --ipc=host (or --shm-size=16g)",
                            "none beyond host RAM used as shared memory",
                            {"container": {"ipc": "host", "shm_size": "16g"}}),
                     Remedy("env", "NCCL_SHM_DISABLE=1", "NCCL falls back to slower transports between local GPUs",
                            {"env": {"set": {"NCCL_SHM_DISABLE": "1"}, "unset": []}})))]


@rule(
    "SP-GPU-001", "other", "Mixed GPU kinds in one tensor parallel group",
    facts=("vLLM sizes memory from the smallest GPU and kernels from the current device; ranks on different GPU kinds "
           "run at the slowest one's pace and may pick different kernels.",),
    sources=("vllm/v1/worker/gpu_worker.py@v0.16.0 (determine_available_memory)",
             "vllm/v1/core/kv_cache_utils.py@v0.16.0 (minimum num_blocks over ranks)"), platforms=ANY_PLATFORM,
)
def mixed_gpus(dep, ctx) -> list[Finding]:
    kinds = dep.cluster.kinds
    if len(kinds) <= 1:
        return []
    ccs = {g.cc_str for g in dep.cluster.gpus}
    return [Finding("SP-GPU-001", "other", "warning", f"{len(kinds)} GPU kinds: {', '.join(kinds)}",
                    f"Compute capabilities {', '.join(sorted(ccs))}. Memory is sized by the smallest GPU and every "
                    "rank waits for the slowest; "
                    "set CUDA_VISIBLE_DEVICES to one kind.",
                    tuple(Evidence(f"GPU {g.index}: {g.name} ({g.cc_str})",
                                   f"cluster ({dep.cluster.source})") for g in dep.cluster.gpus),
                    (Remedy("env", "CUDA_VISIBLE_DEVICES=<indices of one GPU kind>", "fewer GPUs may be used", None),))]


@rule(
    "SP-CUDA-001", "cuda_driver_arch", "The installed torch has no kernels for this GPU",
    facts=("PyTorch wheels carry kernels for a list of architectures (torch.cuda.get_arch_list()); a GPU outside it "
           "fails with 'no kernel image is available for execution on the device'.",
           "A GPU can also run PTX of a lower compute_XY entry of the same major version."),
    sources=("https://pytorch.org/get-started/locally/ (CUDA builds and supported architectures)",),
)
def torch_arch(dep, ctx) -> list[Finding]:
    archs = dep.cluster.torch_cuda_arch_list
    if not archs:
        return []
    sms = {a.split("_")[-1] for a in archs}
    out = []
    seen = set()
    for g in dep.cluster.gpus:
        if g.compute_capability is None or g.cc_int in seen:
            continue
        seen.add(g.cc_int)
        major = g.compute_capability[0]
        sm = str(g.cc_int)
        ptx = any(a.startswith("compute_") and a.split("_")[-1][:-1] == str(major) and int(a.split("_")[-1]) <= g.cc_int
                  for a in archs)
        if sm in sms or f"{sm}a" in sms or ptx:
            continue
        out.append(Finding("SP-CUDA-001", "cuda_driver_arch", "error", f"torch was not built for sm_{sm} ({g.name})",
                           f"The installed torch supports {', '.join(archs)}; {g.name} is compute capability "
                           f"{g.cc_str}. CUDA kernels will fail with 'no kernel image is available for execution on "
                           "the device'.",
                           (Evidence(f"torch.cuda.get_arch_list() = {list(archs)}",
                                     "local probe"),
                            Evidence(f"{g.name}: compute capability {g.cc_str}", f"cluster ({dep.cluster.source})")),
                           (Remedy("upgrade", "a torch / engine build for this GPU (e.g. CUDA 12.8+ wheels for sm_120)",
                                   "reinstall of torch and the engine",
                                   {"upgrade": {"package": "torch", "specifier": ">=2.7"}}),)))
    return out


@rule(
    "SP-CUDA-003", "cuda_driver_arch", "The engine's prebuilt kernels do not cover this GPU",
    facts=("Engine wheels carry SASS for a list of architectures; a GPU runs SASS of its own major version at a lower "
           "or equal minor, nothing else: 'no kernel image is available for execution on the device'.",
           "vLLM wheels: 7.0-9.0 before 0.9.0 (CUDA 12.4), 7.0-12.0 from 0.9.0 (CUDA 12.8; sm_120 was reported missing "
           "from the prebuilt 0.9.x image and wheel); nothing below 7.0. sgl-kernel: sm_80 and newer only. llama.cpp "
           "builds named main/server (before July 2024): 5.2, 6.1, 7.0 by default."),
    sources=("servepilot/engines/vllm/knowledge/builds.yaml", "servepilot/engines/sglang/knowledge/builds.yaml",
             "servepilot/engines/llamacpp/knowledge/builds.yaml"),
)
def engine_build_archs(dep, ctx) -> list[Finding]:
    if dep.cluster.torch_cuda_arch_list:
        return []  # probed: SP-CUDA-001 judges the installed torch itself
    built = ctx.resolution.release.build_archs
    if built is None:
        return []
    archs, source, what = built
    out, seen = [], set()
    for g in dep.cluster.gpus:
        if g.compute_capability is None or g.cc_int in seen:
            continue
        seen.add(g.cc_int)
        if runs_on(g.compute_capability, archs):
            out += _reported_gap(dep, ctx, g, what)
            continue
        remedies = []
        upgrade = _upgrade_for(dep, ctx, g.compute_capability)
        if upgrade:
            remedies.append(Remedy("upgrade", f"pip install '{upgrade[0]}{upgrade[1]}'", f"the first {upgrade[0]} "
                                                                                         "release whose wheels carry "
                                                                                         f"sm_{g.cc_int} kernels",
                                   {"upgrade": {"package": upgrade[0], "specifier": upgrade[1]}}))
        remedies.append(Remedy("hardware", f"GPUs with compute capability {', '.join(archs)}", "different hardware",
                               {"hardware": {"min_compute_capability": archs[0]}}))
        out.append(Finding("SP-CUDA-003", "cuda_driver_arch", "error", f"{what} has no kernels for sm_{g.cc_int} "
                                                                       f"({g.name})",
                           f"{what} carries kernels for compute capability {', '.join(archs)}; {g.name} is {g.cc_str}. "
                           "The first CUDA kernel will fail with "
                           "'no kernel image is available for execution on the device'. A build from source for this "
                           "GPU (TORCH_CUDA_ARCH_LIST / CMAKE_CUDA_ARCHITECTURES) would differ.",
                           (Evidence(f"{what}: {', '.join(archs)}",
                                     source),
                            Evidence(f"{g.name}: compute capability {g.cc_str}", f"cluster ({dep.cluster.source})")),
                           tuple(remedies)))
    return out


def _reported_gap(dep, ctx, g, what) -> list[Finding]:
    """A warning where the build lists the GPU's architecture but its users reported no kernel image."""
    row = ctx.resolution.release.wheel
    if dep.engine != "vllm" or row is None or g.cc_str not in (row.reported_missing or ()):
        return []
    return [Finding("SP-CUDA-003", "cuda_driver_arch", "warning", f"{what} was reported to have no kernels for "
                                                                  f"sm_{g.cc_int} ({g.name})",
                    f"{what} lists compute capability {g.cc_str} in its build, yet users of the prebuilt wheel and "
                    "image of these releases "
                    "report 'no kernel image is available for execution on the device' on such GPUs. A build from "
                    "source with "
                    f"TORCH_CUDA_ARCH_LIST={g.cc_str}, or a release outside {row.versions}, avoids the reported gap.",
                    (Evidence(f"sm_{g.cc_int} failures reported for vLLM {row.versions}", str(row.reported_source)),
                     Evidence(f"{g.name}: compute capability {g.cc_str}", f"cluster ({dep.cluster.source})")), ())]


def runs_on(cc: tuple[int, int], archs) -> bool:
    """Whether SASS built for one of `archs` ("8.0") runs on compute capability `cc`: same major, minor <= the GPU's."""
    for a in archs:
        major, minor = (int(x) for x in str(a).split("."))
        if major == cc[0] and minor <= cc[1]:
            return True
    return False


def _upgrade_for(dep, ctx, cc) -> tuple[str, str] | None:
    """The first release range whose wheels cover `cc`, for an upgrade remedy."""
    if dep.engine != "vllm":
        return None
    for row in ctx.resolution.release.wheels:
        reported = f"{cc[0]}.{cc[1]}" in (row.reported_missing or ())
        if runs_on(cc, row.archs) and not reported and str(row.versions).startswith(">="):
            return "vllm", str(row.versions).split(",")[0]
    return None


@rule(
    "SP-CUDA-002", "cuda_driver_arch", "The NVIDIA driver is too old for these GPUs",
    facts=("Blackwell GPUs (compute capability 10.x and 12.x) need CUDA 12.8 or newer; a driver whose CUDA version is "
           "older cannot run kernels built for them.",),
    sources=("https://docs.nvidia.com/cuda/archive/12.8.0/cuda-toolkit-release-notes/ (Blackwell sm_100/sm_120 support "
             "from CUDA 12.8)",),
)
def driver_too_old(dep, ctx) -> list[Finding]:
    driver = dep.cluster.cuda_driver_version
    if not driver:
        return []
    try:
        have = tuple(int(p) for p in str(driver).split(".")[:2])
    except ValueError:
        return []
    blackwell = [g for g in dep.cluster.gpus if g.compute_capability and g.compute_capability[0] in (10, 12)]
    if not blackwell or have >= (12, 8):
        return []
    g = blackwell[0]
    return [Finding("SP-CUDA-002", "cuda_driver_arch", "error", f"driver CUDA {driver} cannot run {g.name} (needs "
                                                                "12.8+)",
                    f"{g.name} is compute capability {g.cc_str}; the installed driver supports CUDA up to {driver}. "
                    "torch will report that the driver is too old or that no kernel image is available.",
                    (Evidence(f"driver supports CUDA {driver}",
                              "local probe (NVML)"),
                     Evidence(f"{g.name}: compute capability {g.cc_str}", f"cluster ({dep.cluster.source})")),
                    (Remedy("upgrade", "an NVIDIA driver of the R570 branch or newer (CUDA 12.8+)",
                            "a driver upgrade and reboot",
                            {"upgrade": {"package": "nvidia-driver", "specifier": ">=570"}}),))]


@rule(
    "SP-NCCL-001", "nccl_distributed", "NCCL settings for a PCIe-only machine",
    facts=("Without NVLink, NCCL moves TP traffic over PCIe; NCCL_P2P_DISABLE=1 or NCCL_P2P_LEVEL restrictions force "
           "it through host memory.",
           "NCCL_PROTO=LL limits NCCL to the low-latency protocol: small messages fast, large all-reduces (prefill) at "
           "a fraction of bandwidth."),
    sources=("https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html (NCCL_PROTO, NCCL_P2P_LEVEL, "
             "NCCL_P2P_DISABLE)",),
)
def nccl_settings(dep, ctx) -> list[Finding]:
    env = dep.launch.shell.env or {}
    ranks = sizes.tp(dep.launch) * sizes.pp(dep.launch)
    if ranks <= 1:
        return []
    notes = []
    if env.get("NCCL_PROTO"):
        notes.append(f"NCCL_PROTO={env['NCCL_PROTO']} pins NCCL's protocol; large all-reduces lose bandwidth (NCCL "
                     "picks per message size by default)")
    if env.get("NCCL_P2P_DISABLE") in ("1", "true"):
        notes.append("NCCL_P2P_DISABLE=1 sends all GPU-to-GPU traffic through host memory")
    if env.get("NCCL_P2P_LEVEL") and dep.cluster.topology != "pcie":
        notes.append(f"NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']} on a "
                     f"{'NVLink' if dep.cluster.topology == 'nvlink' else 'machine whose topology is unknown'}: only "
                     "needed on PCIe machines whose P2P path hangs")
    if dep.cluster.topology == "pcie" and not env.get("NCCL_P2P_LEVEL") and not env.get("NCCL_P2P_DISABLE"):
        notes.append("PCIe-only GPUs: if NCCL hangs at init, NCCL_P2P_DISABLE=1 (or NCCL_P2P_LEVEL) is the usual cure "
                     "(IOMMU / ACS blocks P2P on many boards)")
    if not notes:
        return []
    unset = [k for k in ("NCCL_PROTO",) if k in env]
    remedies = (Remedy("env", "unset " + " ".join(unset), "NCCL chooses protocols itself",
                       {"env": {"set": {}, "unset": unset}}),) if unset else ()
    return [
        Finding(
            "SP-NCCL-001",
            "nccl_distributed",
            "info" if not unset else "warning",
            "NCCL environment for this topology",
            "\n".join(f"- {n}" for n in notes),
            tuple(Evidence(f"{k}={v}", "command line environment") for k, v in env.items() if k.startswith("NCCL_"))
            + (Evidence(f"topology: {dep.cluster.topology or 'unknown'}", f"cluster ({dep.cluster.source})"),),
            remedies,
        )
    ]


@rule(
    "SP-GPU-002", "other", "An option that needs another GPU generation",
    facts=("Some options only have kernels for one GPU generation (e.g. DeepGEMM MegaMoE and the FP4 indexer cache "
           "need SM100).",),
    sources=("servepilot/engines/vllm/knowledge/gpu_flags.yaml",),
    engines=("vllm",),
)
def gpu_generation_flags(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.resolve import cc_ok

    res = ctx.resolution
    if res.gpu_cc is None or res.engine_version is None:
        return []
    out = []
    for row in res.release.gpu_flags:
        value = _option(dep.launch.options, row.option)
        if value is None or str(value).lower() != str(row.value).lower() or cc_ok(row.requires, res.gpu_cc):
            continue
        out.append(Finding("SP-GPU-002", "other", "error", f"{row['option']}={row['value']} needs another GPU "
                                                           "generation",
                           f"Compute capability {res.gpu_cc[0]}.{res.gpu_cc[1]} is outside {row['requires']}: "
                           f"{row['message']}",
                           (Evidence(f"{row['option']} requires {row['requires']}", row.source),),
                           (Remedy("flag", f"drop {row['option']}", "the engine's default for this GPU",
                                   {"set": {}, "unset": [row.option]}),)))
    return out


def _option(options: dict, dotted: str):
    value = options
    for part in dotted.split("."):
        if isinstance(value, str):
            import json

            try:
                value = json.loads(value)
            except ValueError:
                return None
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value
