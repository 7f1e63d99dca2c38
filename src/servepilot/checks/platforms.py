"""Which rules may judge a GPU that is not an NVIDIA one, and what stays unknown there.

Most rules encode CUDA facts: attention backends by compute capability, quantization kernels
by minimum capability, CUDA driver and wheel architectures, NCCL on NVLink or PCIe. On an AMD
GPU (ROCm) or an accelerator servepilot has no platform facts for (Intel Gaudi or Arc, Huawei
Ascend, an AMD GPU of unknown gfx target), such a rule would judge by facts that do not hold.

So the default is closed: a rule runs off CUDA only when it declares the platform
(`@rule(..., platforms=("rocm",))`) or declares itself platform-neutral (`platforms=ANY_PLATFORM`:
its facts are of the engine's argument parser, the model's config, parallel sizes or memory
arithmetic). What
the skipped rules would have decided becomes a named unknown (verdict `unknown`, exit 4),
unless a ROCm rule decides it.
"""

from __future__ import annotations

from servepilot.checks.registry import ANY_PLATFORM
from servepilot.checks.unknowns import Unknown


def rule_applies(rule, platform: str | None) -> bool:
    """Whether `rule` may judge GPUs of `platform` ("cuda", "rocm", "unknown", None: no GPU)."""
    if rule.platforms == ANY_PLATFORM:
        return True
    if rule.platforms:
        return platform in rule.platforms
    return platform in (None, "cuda")


def platform_unknowns(dep, ctx) -> list[Unknown]:
    """The unknowns of a GPU platform other than CUDA (empty on NVIDIA GPUs or with no GPU)."""
    cluster = dep.cluster
    platform = cluster.platform
    if platform in (None, "cuda"):
        return []
    if platform == "unknown":
        return [_unknown_platform(cluster)]
    if dep.engine != "vllm":
        engine = {"sglang": "SGLang", "llama.cpp": "llama.cpp (HIP)"}.get(dep.engine, dep.engine)
        return [
            Unknown(
                "kernels on ROCm",
                f"servepilot has not read {engine}'s ROCm code (attention backends, quantization "
                f"kernels, the gfx targets its builds carry) for {_gpu_words(cluster)}",
                "the engine's own start-up on this GPU (servepilot launch), or a check on an NVIDIA GPU",
            )
        ]
    from servepilot.checks.rules.rocm_vllm import rocm_vllm_unknowns

    return rocm_vllm_unknowns(dep, ctx)


def _gpu_words(cluster) -> str:
    g = cluster.gpus[0]
    arch = f" ({g.gfx_arch})" if g.gfx_arch else ""
    return f"{g.name}{arch}"


def _unknown_platform(cluster) -> Unknown:
    from servepilot.hardware.catalog import unmodelled_family

    kinds = {g.platform for g in cluster.gpus}
    if len(kinds) > 1:
        return Unknown(
            "GPU platform",
            "the GPUs mix platforms (" + ", ".join(sorted(kinds)) + "): one engine process "
            "runs one platform's kernels",
            "GPUs of one kind (--gpu NAMExN)",
        )
    g = cluster.gpus[0]
    family = unmodelled_family(g.name)
    if family is not None and family["vendor"] == "amd":
        why = (
            f"{g.name} is an AMD GPU whose gfx target servepilot does not know, so none of "
            "its ROCm facts (FP8 formats, gfx9-only kernels) can be applied"
        )
        settle = "--gpu with a catalog AMD GPU (e.g. mi300x) or its gfx target (e.g. gfx1100)"
    else:
        platform = family["platform"] if family else "an accelerator servepilot does not know"
        served = f", served by {family['served_by']}" if family else ""
        why = (
            f"{g.name} is {platform}{served}; servepilot's attention, quantization and "
            "kernel facts are for NVIDIA (CUDA) and AMD (ROCm) GPUs"
        )
        settle = (
            "the engine's own start-up on this hardware (servepilot launch), or a check "
            "on a GPU in servepilot's catalog"
        )
    return Unknown("GPU platform", why, settle)
