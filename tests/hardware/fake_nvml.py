"""A scripted stand-in for pynvml (nvidia-ml-py): the same function names, return shapes and
NVMLError, driven by a list of fake GPUs. Inject with `install(monkeypatch, FakeNvml(...))`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

# nvml.h return codes used below
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
}


class NVMLError(Exception):
    def __init__(self, value: int):
        self.value = value
        super().__init__(value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


MIB = 1024 * 1024


@dataclass
class FakeGpu:
    name: str
    memory_mib: int
    cc: tuple[int, int]
    uuid: str = ""
    nvlinks: int = 0  # active links
    lost: bool = False  # nvmlDeviceGetHandleByIndex fails (GPU fell off the bus)
    bytes_name: bool = False  # old pynvml returned bytes


class FakeNvml:
    """Module-like object with pynvml's API."""

    NVMLError = NVMLError
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED

    def __init__(self, gpus: list[FakeGpu], driver: str = "570.124.06", cuda: int = 12080,
                 library_missing: bool = False):
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.library_missing = library_missing
        self.initialized = False
        self.shutdowns = 0

    def nvmlInit(self):
        if self.library_missing:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized = True

    def nvmlShutdown(self):
        self._check()
        self.initialized = False
        self.shutdowns += 1

    def _check(self):
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int):
        self._check()
        if index >= len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu):
        self._check()
        return handle.name.encode() if handle.bytes_name else handle.name

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        self._check()
        return handle.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu):
        self._check()
        total = handle.memory_mib * MIB
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu):
        self._check()
        return handle.cc

    def nvmlDeviceGetNvLinkState(self, handle: FakeGpu, link: int) -> int:
        self._check()
        if handle.nvlinks == 0:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if link >= 18:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return NVML_FEATURE_ENABLED if link < handle.nvlinks else NVML_FEATURE_DISABLED


def install(monkeypatch, fake: FakeNvml) -> FakeNvml:
    """Make servepilot.hardware.nvml load `fake` instead of pynvml."""
    import servepilot.hardware.nvml as nvml

    monkeypatch.setattr(nvml, "load_nvml", lambda: fake)
    return fake


def rtx_pro_6000_box(n: int = 8) -> list[FakeGpu]:
    """The story's machine: n RTX PRO 6000 Blackwell Workstation cards on PCIe."""
    return [
        FakeGpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887, (12,
                                                                             0),
                uuid=f"GPU-{i:02d}aa-rtx") for i in range(n)
    ]


def h100_nvlink_box(n: int = 4) -> list[FakeGpu]:
    return [FakeGpu("NVIDIA H100 80GB HBM3", 81559, (9, 0), uuid=f"GPU-{i:02d}bb-h100", nvlinks=18) for i in range(n)]
