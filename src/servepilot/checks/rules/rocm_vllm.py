"""vLLM on AMD GPUs (ROCm): the quantization methods each release accepts there, and what
servepilot cannot judge on ROCm (attention backends, kernels) named as unknowns.

The facts are in engines/vllm/knowledge/rocm.yaml, read from vllm/platforms/rocm.py per release.
Only rules that declare platforms=("rocm",) or are platform-neutral (checks/platforms.py) run on
an AMD GPU; the CUDA ones (compute capability, Marlin, CUDA wheels) do not.
"""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule
from servepilot.checks.unknowns import Unknown

KNOWLEDGE = "servepilot/engines/vllm/knowledge/rocm.yaml"


def _version(dep, ctx) -> str | None:
    return dep.engine_version or getattr(ctx.resolution, "engine_version", None)


def _method(dep, version: str) -> str | None:
    """The quantization method vLLM verifies: --quantization, else the checkpoint's declaration."""
    from servepilot.engines.vllm.resolve import engine_quant_method

    try:
        return engine_quant_method(
            dep, None, version
        )  # no compute capability: no CUDA Marlin override
    except Exception:  # noqa: BLE001 - an unreadable declaration is the quantization unknown's business
        return None


def quant_status(dep, ctx):
    """engines.vllm.rocm.RocmQuant for the launch's quantization, or None when it names none."""
    from servepilot.engines.vllm.rocm import quantization_status

    version = _version(dep, ctx)
    method = _method(dep, version) if version else None
    if not method:
        return None
    return quantization_status(version, method, dep.cluster.gpus[0].gfx_arch)


@rule(
    "SP-ROCM-001",
    "quantization_support",
    "Quantization method not offered by vLLM on ROCm",
    facts=(
        "On ROCm, ModelConfig verifies the quantization method against "
        "RocmPlatform.supported_quantization and stops: '<method> quantization is currently not "
        "supported in rocm.'",
        "The list grew per release (0.5.5: gptq, squeezellm, fp8; 0.16.0 adds awq, gguf, quark, "
        "mxfp4, ...); bitsandbytes is offered only off gfx9 in 0.12-0.16 (warp size 64).",
    ),
    sources=(KNOWLEDGE, "vllm/platforms/interface.py@v0.16.0 (Platform.verify_quantization)"),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_quant_unsupported(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.rocm import first_release_offering

    q = quant_status(dep, ctx)
    if q is None or q.status != "unsupported":
        return []
    version = _version(dep, ctx)
    g = dep.cluster.gpus[0]
    where = (
        "ROCm" if version == "0.5.5" else "rocm"
    )  # 0.5.5 raised its own message from ModelConfig
    detail = (
        f"vLLM {version} on {g.name} ({g.gfx_arch}) will stop at start-up: {q.method} quantization is "
        f"currently not supported in {where}."
        + (
            f" {q.method} is offered only off gfx9 (gfx90a/gfx942/gfx950)."
            if q.gfx9_only_refusal
            else ""
        )
        + f" Offered on ROCm: {', '.join(q.offered)}."
    )
    usual = [m for m in q.offered if m in ("fp8", "gptq", "awq", "quark")]
    remedies = [
        Remedy(
            "overlay",
            f"a checkpoint of the same model in a method vLLM offers on ROCm ({', '.join(usual)})",
            "another download; quality may differ",
            None,
        )
    ]
    later = None if q.gfx9_only_refusal else first_release_offering(q.method, version)
    if later:
        remedies.insert(
            0,
            Remedy(
                "upgrade",
                f"pip install 'vllm>={later}' (a ROCm build)",
                "a new engine release to install and validate",
                None,
            ),
        )
    if q.gfx9_only_refusal:
        remedies.append(
            Remedy(
                "hardware",
                "an AMD GPU outside gfx9 (Radeon gfx11/gfx12)",
                "different hardware",
                None,
            )
        )
    return [
        Finding(
            "SP-ROCM-001",
            "quantization_support",
            "error",
            f"{q.method} is not offered by vLLM {version} on ROCm",
            detail,
            (
                Evidence(
                    f"RocmPlatform.supported_quantization in vLLM {q.versions} on {g.gfx_arch}: "
                    f"{', '.join(q.offered)}",
                    q.source,
                ),
                Evidence(f"GPU {g.name}: {g.gfx_arch}", "servepilot/hardware/data/gpus.json"),
            ),
            tuple(remedies),
        )
    ]


def rocm_vllm_unknowns(dep, ctx) -> list[Unknown]:
    """What servepilot cannot judge for vLLM on an AMD GPU (checks/platforms.py asks)."""
    g = dep.cluster.gpus[0]
    version = _version(dep, ctx)
    out = [
        Unknown(
            "attention backend on ROCm",
            f"servepilot does not model vLLM {version}'s ROCm attention selection (Triton, ROCm and "
            f"AITER backends, which KV cache dtypes and head sizes each accepts on {g.gfx_arch}), nor "
            "the gfx targets the ROCm build carries",
            "the engine's own start-up on this GPU (servepilot launch), or `vllm serve` with "
            "VLLM_ATTENTION_BACKEND=TRITON_ATTN and --kv-cache-dtype auto",
        )
    ]
    q = quant_status(dep, ctx)
    if q is not None and q.status == "unsure":
        out.append(
            Unknown(
                "quantization on ROCm",
                f"whether vLLM {version} offers {q.method} on ROCm: the releases read around it "
                f"({q.versions}) disagree",
                "--engine-version of a release servepilot has read (0.5.5, 0.6.6, 0.8.5, 0.10.2, "
                "0.11.0, 0.12.0, 0.14.1, 0.16.0-0.34.0)",
            )
        )
    elif q is not None and q.status == "unread":
        out.append(
            Unknown(
                "quantization on ROCm",
                f"vLLM {version}'s ROCm quantization list was not read (servepilot read 0.5.5 to 0.34.0)",
                "--engine-version of a release servepilot has read",
            )
        )
    return out
