"""vLLM on AMD GPUs (ROCm): lookups in knowledge/rocm.yaml, for the ROCm rules.

quantization_status(version, method, gfx_arch) says whether RocmPlatform.supported_quantization
of that release lists the method for that gfx target.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.engines import knowledge as kb

GFX9 = ("gfx90a", "gfx942", "gfx950")  # vllm/platforms/rocm.py on_gfx9()


@dataclass(frozen=True)
class RocmQuant:
    status: str  # "supported" | "unsupported" | "unsure" | "unread"
    method: str
    offered: tuple[str, ...] = ()  # what the release offers on this gfx target
    gfx9_only_refusal: bool = False  # offered off gfx9 only (bitsandbytes in 0.12-0.16)
    versions: str = ""  # the row's range
    source: str = ""


def _names(method: str) -> set[str]:
    return {method, method.replace("_", "-"), method.replace("-", "_")}


def quantization_status(version: str, method: str, gfx_arch: str | None) -> RocmQuant:
    row = kb.row_for(kb.load_file("vllm", "rocm").quantization, version)
    if row is None:
        return RocmQuant("unread", method)
    off_gfx9 = tuple(row.not_on_gfx9 or ())
    offered = tuple(row.supported or ()) + (off_gfx9 if gfx_arch not in GFX9 else ())
    names = _names(method)
    if names & set(offered):
        status = "supported"
    elif names & set(row.unsure or ()):
        status = "unsure"
    else:
        status = "unsupported"
    return RocmQuant(status, method, offered, bool(names & set(off_gfx9)), row.versions, row.source)


def first_release_offering(method: str, after: str) -> str | None:
    """The first release read after `after` whose ROCm list offers `method` on every gfx target."""
    for row in kb.load_file("vllm", "rocm").quantization:
        if not row.versions.startswith("=="):
            continue
        release = row.versions[2:]
        if kb.release_version(release) > kb.release_version(after) and _names(method) & set(
            row.supported or ()
        ):
            return release
    return None
