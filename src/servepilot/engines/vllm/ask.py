"""Ask the installed vLLM itself: its own configuration and attention selection, in a child.

`check --ask-engine` runs ask_child.py with the engine's Python (`--engine-python`, else
the first python on PATH that imports vllm). The child gets no GPU memory and no weights;
without a usable GPU here, the capability of `--gpu` is faked. It is bounded in time
(timeout, then the child's process group is killed) and memory (RLIMIT_AS). Anything that
stops it is returned as `error`, never raised.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = Path(__file__).with_name("ask_child.py")
DEFAULT_TIMEOUT_S = 120.0
# The child imports torch and vLLM (~3 GiB of address space mapped, far less resident);
# the limit stops a runaway, not a normal import.
MEMORY_LIMIT_BYTES = 24 * 2**30
# Every driver entry point vLLM's compiled modules link against; each returns
# CUDA_ERROR_NO_DEVICE (100), so they import on a machine without an NVIDIA driver.
_DRIVER_SYMBOLS = """cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetCount cuDeviceGetAttribute
cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuCtxGetCurrent cuCtxSetCurrent cuCtxGetDevice
cuCtxSynchronize cuGetErrorString cuGetErrorName cuGetProcAddress cuGetProcAddress_v2
cuMemAddressFree cuMemAddressReserve cuMemCreate cuMemGetAllocationGranularity cuMemMap
cuMemRelease cuMemSetAccess cuMemUnmap cuMemGetInfo cuPointerGetAttribute cuTensorMapEncodeTiled
cuTensorMapEncodeIm2col cuModuleLoadData cuModuleGetFunction cuModuleUnload cuLaunchKernel
cuLaunchKernelEx cuFuncSetAttribute cuFuncGetAttribute cuOccupancyMaxActiveClusters
cuStreamSynchronize cuLibraryLoadData cuLibraryGetKernel cuKernelGetFunction""".split()


@dataclasses.dataclass
class EngineReply:
    """What the child said: its answers, or why there are none."""

    answers: list = dataclasses.field(default_factory=list)
    engine_version: str | None = None
    python: str | None = None
    device: dict | None = None
    error: str | None = None  # the engine could not be asked: missing, import error, timeout
    wall_s: float = 0.0
    import_s: float | None = None
    environment: dict = dataclasses.field(default_factory=dict)  # flashinfer_cubin, nvidia_artifactory
    notes: list = dataclasses.field(default_factory=list)


def find_engine_python(explicit: str | None = None) -> tuple[str | None, str | None]:
    """(python, None) or (None, why not). Without `explicit`, this interpreter if it has vllm."""
    if explicit:
        path = shutil.which(explicit) or explicit
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return None, f"--engine-python {explicit}: not an executable file"
        return path, None
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable, None
    for name in ("python3", "python"):
        path = shutil.which(name)
        if path and os.path.realpath(path) != os.path.realpath(sys.executable):
            probe = subprocess.run([path, "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
                                   capture_output=True, text=True, timeout=30)
            if probe.stdout.strip() == "True":
                return path, None
    return None, "vLLM is not importable here (pass --engine-python PATH: the python of the engine's environment)"


def stub_driver_dir() -> tuple[Path | None, str | None]:
    """A directory holding a stub libcuda.so.1, built once with the C compiler."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "servepilot" / "libcuda-stub-1"
    lib = cache / "libcuda.so.1"
    if lib.exists():
        return cache, None
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return None, "no C compiler to build the stub CUDA driver library vLLM's modules link against"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        src = Path(tmp) / "stub.c"
        src.write_text("".join(f"int {name}(void) {{ return 100; }}\n" for name in _DRIVER_SYMBOLS))
        built = Path(tmp) / "libcuda.so.1"
        run = subprocess.run([compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(built), str(src)],
                             capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            return None, f"building the stub CUDA driver library failed: {run.stderr.strip()[-300:]}"
        os.replace(built, lib)  # atomic: a concurrent run sees the whole file or none
    return cache, None


def _limit_child():
    """In the child, before exec: its own process group (killed whole on timeout), a memory cap."""
    import resource

    os.setsid()
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ValueError, OSError):
        pass


def ask_engine(questions: list[dict], *, python: str | None = None, cc: str | None = None,
               gpu_name: str | None = None, gpu_count: int = 1, artifactory: bool | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S, env: dict | None = None) -> EngineReply:
    """Ask the vLLM of `python` each question ({id, model, args}); `cc` None: the real device.
    `env`: the command's own environment assignments (VLLM_* settings decide things too)."""
    started = time.monotonic()
    python, why = find_engine_python(python)
    if python is None:
        return EngineReply(error=why)
    reply = EngineReply(python=python)
    command_env = dict(env or {})
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the engine's environment, not servepilot's
    env.update({k: str(v) for k, v in command_env.items()})
    if cc is not None:
        stubs, why = stub_driver_dir()
        if stubs is None:
            return dataclasses.replace(reply, error=why)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(stubs), env.get("LD_LIBRARY_PATH")) if p)
        env["CUDA_VISIBLE_DEVICES"] = ""  # a faked device: never the real one, if any
    with tempfile.TemporaryDirectory(prefix="servepilot-ask-") as tmp:
        request, answers = Path(tmp) / "request.json", Path(tmp) / "answers.json"
        request.write_text(json.dumps({"cc": cc, "gpu_name": gpu_name, "gpu_count": gpu_count,
                                       "artifactory": artifactory, "questions": questions}))
        try:
            proc = subprocess.Popen([python, str(CHILD), str(request), str(answers)], cwd=tmp, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    preexec_fn=_limit_child)
        except OSError as e:
            return dataclasses.replace(reply, error=f"could not start {python}: {e}")
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return dataclasses.replace(reply, error=f"the engine did not answer within {timeout_s:.0f} s (stopped)",
                                       wall_s=time.monotonic() - started)
        reply.wall_s = time.monotonic() - started
        try:
            data = json.loads(answers.read_text())
        except (OSError, ValueError):
            data = None  # none written, or half of it (a child stopped while writing)
        if not isinstance(data, dict):
            tail = (stderr or b"").decode(errors="replace").strip().splitlines()[-3:]
            return dataclasses.replace(reply,
                                       error=f"the engine's python exited with {proc.returncode}: " + " | ".join(tail))
    reply.engine_version = data.get("engine_version")
    reply.device = data.get("device")
    reply.import_s = data.get("import_s")
    reply.environment = data.get("environment") or {}
    reply.answers = data.get("answers", [])
    if data.get("error"):
        reply.error = f"vLLM could not be asked: {data['error']}"
    return reply


def _kill_group(proc) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.communicate()  # reaps it and closes the stderr pipe
