"""NVML access: the only module that imports pynvml (nvidia-ml-py).

Tests replace `load_nvml` with a scripted fake that has pynvml's API (STYLE.md habit 10).
A GPU that NVML cannot read is reported with its error, not dropped (habit 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# pynvml's NVML_NVLINK_MAX_LINKS (nvml.h: 18 links on Hopper/Blackwell); older GPUs have fewer
# and answer NVML_ERROR_INVALID_ARGUMENT for the rest, which counts as "no link".
NVLINK_MAX_LINKS = 18


@dataclass(frozen=True)
class NvmlDevice:
    index: int
    name: str | None
    uuid: str | None
    memory_total: int | None
    compute_capability: tuple[int, int] | None
    nvlinks_active: int = 0
    error: str | None = None


@dataclass(frozen=True)
class NvmlReport:
    devices: tuple[NvmlDevice, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "12.8": the newest CUDA the driver supports
    error: str | None = None  # why NVML could not be used at all
    notes: tuple[str, ...] = field(default=())


def load_nvml():
    """The pynvml module (nvidia-ml-py). Tests monkeypatch this to return a fake."""
    import pynvml  # lazy and only here: NVML is imported in this one module

    return pynvml


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def cuda_version_str(encoded: int) -> str:
    """NVML encodes the CUDA driver version as 1000*major + 10*minor: 12080 -> "12.8"."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def read_nvml() -> NvmlReport:
    """Everything NVML says about this machine's GPUs; never raises for a missing GPU."""
    try:
        nv = load_nvml()
    except ImportError:
        return NvmlReport(error="nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return NvmlReport(error=f"NVML is not available: {exc}")
    try:
        return _read(nv)
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def _read(nv) -> NvmlReport:
    notes: list[str] = []
    driver = cuda = None
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
    except nv.NVMLError as exc:
        notes.append(f"driver version unreadable: {exc}")
    try:
        cuda = cuda_version_str(int(nv.nvmlSystemGetCudaDriverVersion()))
    except nv.NVMLError as exc:
        notes.append(f"CUDA driver version unreadable: {exc}")
    try:
        count = int(nv.nvmlDeviceGetCount())
    except nv.NVMLError as exc:
        return NvmlReport(driver_version=driver, cuda_driver_version=cuda, error=f"cannot count GPUs: {exc}",
                          notes=tuple(notes))
    devices = tuple(_device(nv, i) for i in range(count))
    return NvmlReport(devices=devices, driver_version=driver, cuda_driver_version=cuda, notes=tuple(notes))


def _device(nv, index: int) -> NvmlDevice:
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as exc:
        return NvmlDevice(index, None, None, None, None, error=f"{exc}")
    name = uuid = memory = cc = None
    errors = []
    try:
        name = _text(nv.nvmlDeviceGetName(handle))
    except nv.NVMLError as exc:
        errors.append(f"name: {exc}")
    try:
        uuid = _text(nv.nvmlDeviceGetUUID(handle))
    except (nv.NVMLError, AttributeError):
        uuid = None
    try:
        memory = int(nv.nvmlDeviceGetMemoryInfo(handle).total)
    except nv.NVMLError as exc:
        errors.append(f"memory: {exc}")
    try:
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
        cc = (int(major), int(minor))
    except nv.NVMLError as exc:
        errors.append(f"compute capability: {exc}")
    return NvmlDevice(
        index=index,
        name=name,
        uuid=uuid,
        memory_total=memory,
        compute_capability=cc,
        nvlinks_active=_active_nvlinks(nv, handle),
        error="; ".join(errors) or None,
    )


def _active_nvlinks(nv, handle) -> int:
    active = 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            if nv.nvmlDeviceGetNvLinkState(handle, link) == getattr(nv, "NVML_FEATURE_ENABLED", 1):
                active += 1
        except nv.NVMLError:
            continue
    return active
