"""What an SGLang release carries beyond its choices for one deployment (see ReleaseFacts):
its sgl-kernel's architectures; config classes are transformers' own."""

from __future__ import annotations

from servepilot.engines import knowledge as kb
from servepilot.engines.resolution import ReleaseFacts
from servepilot.engines.vllm.release import quant_speed, transformers_config_types


def release_facts(dep, res) -> ReleaseFacts:
    version = dep.engine_version or res.engine_version
    wheel = kb.row_for(kb.load_file("sglang", "builds").wheels, version) if version else None
    return ReleaseFacts(
        version=version,
        build_archs=(tuple(wheel.archs), wheel.source,
                     f"SGLang {version}'s default install (sgl-kernel, pinned torch)") if wheel else None,
        wheel=wheel,
        quant_speed=quant_speed(),
        config_types=transformers_config_types(),
    )


def architecture_status(arch: str, version: str) -> tuple[str, str | None]:
    """("native" | "absent" | "unknown", the first release read that registers it) for SGLang
    `version`, from the model modules of the releases read (knowledge/architectures.yaml)."""
    from packaging.version import Version

    data = kb.load_file("sglang", "architectures")
    reads = [Version(r) for r in data["read"]]
    v = Version(version)
    row = data["architectures"].get(arch)
    if v < reads[0]:
        return "unknown", row["since"] if row else None
    if row is None:
        return ("absent" if v <= reads[-1] else "unknown"), None
    since = row["since"]
    removed, returned = row.get("removed_in"), row.get("returned_in")
    if removed and v >= Version(removed) and not (returned and v >= Version(returned)):
        return "absent", since
    if v >= Version(since):
        return "native", since
    if row.get("absent_in") and v <= Version(row["absent_in"]):
        return "absent", since
    return "unknown", since


def transformers_fallback(version: str):
    """The row saying this release tries the Transformers implementation of an unknown
    architecture before it gives up, or None (it raises at once)."""
    return kb.row_for(kb.load_file("sglang", "architectures").transformers_fallback, version)


def hybrid_gdn_blackwell(version: str | None):
    """(the row for `version` or None, every model_type any release read counts as hybrid GDN)."""
    rows = kb.load_file("sglang", "attention").hybrid_gdn_blackwell
    every = {t for r in rows for t in r.model_types}
    return (kb.row_for(rows, version) if version else None), every


def forced_refusals(version: str) -> list:
    """The asserts on a named attention backend in `version` (attention.yaml forced_refusals)."""
    return kb.rows_for(kb.load_file("sglang", "attention").forced_refusals, version)


def pdmux_majors(version: str):
    """The compute capability majors --enable-pdmux knows in `version`, as a row, or None."""
    return kb.row_for(kb.load_file("sglang", "builds").pdmux_majors, version)


def custom_all_reduce(version: str):
    """The custom all-reduce's world sizes and peer-access probe in `version` (builds.yaml
    custom_all_reduce), as a row, or None."""
    return kb.row_for(kb.load_file("sglang", "builds").custom_all_reduce, version)


def fp8_block_moe(version: str):
    """The whole-FP8-blocks-per-rank check of the MoE layers in `version`, as a row, or None."""
    return kb.row_for(kb.load_file("sglang", "quantization").fp8_block_moe, version)


def architecture_backends(version: str, arch: str | None):
    """The model-specific backend assert for `arch` in `version` (attention.yaml
    architecture_backends), or None."""
    if not arch:
        return None
    rows = kb.rows_for(kb.load_file("sglang", "attention").architecture_backends, version)
    return next((row for row in rows if arch in row.archs), None)
