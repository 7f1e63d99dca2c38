"""What servepilot knows about the GPUs a command will run on."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str  # as NVML reports it, or the catalog's display name for --gpu
    key: str | None  # catalog key ("rtx-pro-6000-blackwell-workstation"), None if unmatched
    memory_bytes: int
    compute_capability: tuple[int, int] | None
    fp8: bool | None = None
    fp4: bool | None = None
    bandwidth_gbps: float | None = None
    nvlink: bool | None = None
    error: str | None = None  # a GPU that NVML could not read (shown, not dropped)
    vendor: str = "nvidia"  # "nvidia" | "amd" | "intel" | "huawei" | "google" (catalog `vendor`)
    gfx_arch: str | None = None  # an AMD GPU's LLVM target ("gfx942"); no compute capability there
    fp8_formats: tuple[str, ...] = ()  # torch FP8 dtypes it computes in (AMD: fnuz on gfx942, OCP later)

    @property
    def platform(self) -> str:
        """"cuda", "rocm", or "unknown" (a GPU whose platform servepilot has no facts for)."""
        if self.vendor == "nvidia":
            return "cuda"
        if self.vendor == "amd" and self.gfx_arch:
            return "rocm"
        return "unknown"

    @property
    def cc_str(self) -> str:
        if self.compute_capability is None:
            return "?"
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def cc_int(self) -> int | None:
        """vLLM's DeviceCapability.to_int(): 12.0 -> 120, 9.0 -> 90."""
        if self.compute_capability is None:
            return None
        return self.compute_capability[0] * 10 + self.compute_capability[1]


@dataclass(frozen=True)
class Cluster:
    """The GPUs and host facts of one machine (multi-node comes later, via Ray)."""

    gpus: tuple[Gpu, ...] = ()
    source: str = "none"  # "probe" | "flag" | "none"
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # max CUDA the driver supports, e.g. "12.8"
    topology: str | None = None  # "nvlink" | "pcie" | None
    shm_bytes: int | None = None  # /dev/shm size
    torch_cuda_arch_list: tuple[str, ...] | None = None  # ("sm_80", "sm_90", ...) when torch is installed
    notes: tuple[str, ...] = ()  # "no GPU found and no --gpu given: ..." and similar
    remote_host: str | None = None  # probed facts are of this machine, not of an ssh host
    extra: dict = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def kinds(self) -> tuple[str, ...]:
        seen: list[str] = []
        for g in self.gpus:
            k = g.key or g.name
            if k not in seen:
                seen.append(k)
        return tuple(seen)

    @property
    def platform(self) -> str | None:
        """The engine platform of the GPUs: "cuda", "rocm", "unknown" (a GPU servepilot has no
        platform facts for, or a mix), or None when there are no GPUs."""
        kinds = {g.platform for g in self.gpus}
        if not kinds:
            return None
        return kinds.pop() if len(kinds) == 1 else "unknown"

    @property
    def min_memory_bytes(self) -> int | None:
        mems = [g.memory_bytes for g in self.gpus if g.memory_bytes]
        return min(mems) if mems else None
