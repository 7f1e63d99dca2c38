"""SGLang features that exist only for some GPU generations."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/sglang/knowledge/builds.yaml"


@rule(
    "SP-GPU-003",
    "cuda_driver_arch",
    "SGLang's prefill/decode multiplexing does not know this GPU generation",
    facts=(
        "--enable-pdmux divides the SMs with per-generation green-context limits for compute "
        "capability 6.x-9.x "
        "only; on any other GPU (Blackwell 10.x/12.x) the scheduler raises 'Unsupported compute "
        "capability' "
        "unless --pdmux-config-path gives manual_divisions.",
    ),
    sources=(KNOWLEDGE, "sglang/srt/multiplex/pdmux_context.py@v0.5.17 (get_arch_constraints)"),
    engines=("sglang",),
)
def pdmux_generation(dep, ctx) -> list[Finding]:
    from servepilot.engines.sglang.release import pdmux_majors

    opts = dep.launch.options
    cc = ctx.resolution.gpu_cc
    version = dep.engine_version or ctx.resolution.engine_version
    if not opts.get("enable_pdmux") or opts.get("pdmux_config_path") or cc is None or not version:
        return []
    row = pdmux_majors(version)
    if row is None or cc[0] in row.majors:
        return []
    error = row.error.format(major=cc[0], minor=cc[1])
    return [
        Finding(
            "SP-GPU-003",
            "cuda_driver_arch",
            "error",
            f"--enable-pdmux has no SM split for compute capability {cc[0]}.{cc[1]}",
            f"SGLang {version} divides the SMs by per-generation limits known for "
            f"{', '.join(map(str, row.majors))}.x "
            f"only; on this GPU the scheduler stops at start-up: {error}",
            (
                Evidence("--enable-pdmux without --pdmux-config-path", "command line"),
                Evidence(f"known majors: {row.majors}", row.source),
            ),
            (
                Remedy(
                    "flag",
                    "drop --enable-pdmux",
                    "prefill and decode share the GPU without SM partitioning",
                    {"set": {}, "unset": ["enable_pdmux"]},
                ),
            ),
        )
    ]
