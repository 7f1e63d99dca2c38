"""A llama.cpp CUDA build whose compiled architectures leave out the GPU it found.

ggml-cuda prints each device it finds with its compute capability when the backend loads
("  Device 0: Tesla T4, compute capability 7.5, VMM: yes, VRAM: 14912 MiB", ggml_cuda_init in
ggml/src/ggml-cuda/ggml-cuda.cu), and the binary's architecture list among its features, which
common prints in the system_info line ("CUDA : ARCHS = 1200 | ...", the ARCHS feature is
nvcc's __CUDA_ARCH_LIST__, same file; common/common.cpp common_params_get_system_info; both
llama-cpp-python v0.3.36 vendor/llama.cpp). Compiled code runs on its own architecture and,
as PTX compiled on first use, on newer ones, never on an older GPU: when every listed
architecture is newer than a device's capability the build has no code that device can run,
whatever the log goes on to say (often it only stops, or fails at the first kernel).
"""

from __future__ import annotations

import re

_DEVICE = re.compile(
    r"\bDevice (?P<n>\d+): .*?, compute capability (?P<major>\d+)\.(?P<minor>\d+)\b"
)
_ARCHS = re.compile(r"\bCUDA : ARCHS = (?P<archs>\d+(?:,\d+)*)")


def device_capability(text: str) -> tuple[int, int] | None:
    """(device number, capability x10 as nvcc writes it: 7.5 -> 750) from ggml-cuda's line."""
    m = _DEVICE.search(text)
    if m is None:
        return None
    return int(m["n"]), int(m["major"]) * 100 + int(m["minor"]) * 10


def archs_leaving_out(text: str, devices: dict[int, int]) -> str | None:
    """When `text` is the ARCHS line and some device is older than every listed architecture,
    the message the triage signature knows; else None."""
    m = _ARCHS.search(text)
    if m is None or not devices:
        return None
    archs = [int(a) for a in m["archs"].split(",")]
    for n, cc in sorted(devices.items()):
        if all(a > cc for a in archs):
            return (
                f"CUDA : ARCHS = {m['archs']} has no code for device {n} "
                f"(compute capability {cc // 100}.{cc % 100 // 10})"
            )
    return None
