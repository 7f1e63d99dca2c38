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
GFX9 = ("gfx90a", "gfx942", "gfx950")  # vllm/platforms/rocm.py on_gfx9()


def _version(dep, ctx) -> str | None:
    return dep.engine_version or getattr(ctx.resolution, "engine_version", None)


def _method(dep, version: str) -> str | None:
    """The quantization method vLLM verifies: --quantization, else the checkpoint's declaration."""
    from servepilot.engines.vllm.resolve import engine_quant_method

    try:
        return engine_quant_method(dep, None, version)  # no compute capability: no CUDA Marlin override
    except Exception:  # noqa: BLE001 - an unreadable declaration is the quantization unknown's business
        return None


def quant_status(dep, ctx) -> tuple[str, str | None, object] | None:
    """("supported" | "unsupported" | "unsure" | "unread", method, row) for vLLM on ROCm, or None
    when the launch names no quantization."""
    from servepilot.engines import knowledge as kb

    version = _version(dep, ctx)
    if version is None:
        return None
    method = _method(dep, version)
    if not method:
        return None
    row = kb.row_for(kb.load_file("vllm", "rocm").quantization, version)
    if row is None:
        return "unread", method, None
    arch = dep.cluster.gpus[0].gfx_arch or ""
    listed = list(row.supported or []) + (list(row.not_on_gfx9 or []) if arch not in GFX9 else [])
    names = {method, method.replace("_", "-"), method.replace("-", "_")}
    if names & set(listed):
        return "supported", method, row
    if names & set(row.unsure or []):
        return "unsure", method, row
    return "unsupported", method, row


@rule(
    "SP-ROCM-001", "quantization_support", "Quantization method not offered by vLLM on ROCm",
    facts=("On ROCm, ModelConfig verifies the quantization method against "
           "RocmPlatform.supported_quantization and stops: '<method> quantization is currently not "
           "supported in rocm.'",
           "The list grew per release (0.5.5: gptq, squeezellm, fp8; 0.16.0 adds awq, gguf, quark, "
           "mxfp4, ...); bitsandbytes is offered only off gfx9 in 0.12-0.16 (warp size 64)."),
    sources=(KNOWLEDGE, "vllm/platforms/interface.py@v0.16.0 (Platform.verify_quantization)"),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_quant_unsupported(dep, ctx) -> list[Finding]:
    status = quant_status(dep, ctx)
    if status is None or status[0] != "unsupported":
        return []
    _, method, row = status
    version = _version(dep, ctx)
    g = dep.cluster.gpus[0]
    offered = list(row.supported or [])
    if g.gfx_arch not in GFX9:
        offered += list(row.not_on_gfx9 or [])
    gfx9_only = method in (row.not_on_gfx9 or [])
    where = "ROCm" if version == "0.5.5" else "rocm"
    detail = (f"vLLM {version} on {g.name} ({g.gfx_arch}) will stop at start-up: {method} quantization is "
              f"currently not supported in {where}." + (f" {method} is offered only off gfx9 (gfx90a/gfx942/gfx950)."
                                                        if gfx9_only else "")
              + f" Offered on ROCm: {', '.join(offered)}.")
    remedies = [Remedy("overlay", "a checkpoint of the same model in a method vLLM offers on ROCm "
                                  f"({', '.join(m for m in offered if m in ('fp8', 'gptq', 'awq', 'quark'))})",
                       "another download; quality may differ", None)]
    later = _first_release_offering(method, version)
    if later:
        remedies.insert(0, Remedy("upgrade", f"pip install 'vllm>={later}' (a ROCm build)",
                                  "a new engine release to install and validate", None))
    return [Finding("SP-ROCM-001", "quantization_support", "error",
                    f"{method} is not offered by vLLM {version} on ROCm", detail,
                    (Evidence(f"RocmPlatform.supported_quantization in vLLM {row.versions}: {', '.join(offered)}",
                              row.source),
                     Evidence(f"GPU {g.name}: {g.gfx_arch}", "servepilot/hardware/data/gpus.json")),
                    tuple(remedies))]


def _first_release_offering(method: str, after: str) -> str | None:
    """The first read release after `after` whose ROCm list offers `method` (any gfx)."""
    from servepilot.engines import knowledge as kb

    for row in kb.load_file("vllm", "rocm").quantization:
        if not row.versions.startswith("=="):
            continue
        release = row.versions[2:]
        if kb.release_version(release) <= kb.release_version(after):
            continue
        if method in (row.supported or []):
            return release
    return None


def rocm_vllm_unknowns(dep, ctx) -> list[Unknown]:
    """What servepilot cannot judge for vLLM on an AMD GPU (checks/platforms.py asks)."""
    g = dep.cluster.gpus[0]
    version = _version(dep, ctx)
    out = [Unknown(
        "attention backend on ROCm",
        f"servepilot does not model vLLM {version}'s ROCm attention selection (Triton, ROCm and "
        f"AITER backends, which KV cache dtypes and head sizes each accepts on {g.gfx_arch}), nor "
        "the gfx targets the ROCm build carries",
        "the engine's own start-up on this GPU (servepilot launch), or `vllm serve` with "
        "VLLM_ATTENTION_BACKEND=TRITON_ATTN and --kv-cache-dtype auto",
    )]
    status = quant_status(dep, ctx)
    if status is not None and status[0] == "unsure":
        _, method, row = status
        out.append(Unknown(
            "quantization on ROCm",
            f"whether vLLM {version} offers {method} on ROCm: the releases read around it "
            f"({row.versions}) disagree",
            "--engine-version of a release servepilot has read (0.5.5, 0.6.6, 0.8.5, 0.10.2, "
            "0.11.0, 0.12.0, 0.14.1, 0.16.0-0.34.0)",
        ))
    elif status is not None and status[0] == "unread":
        out.append(Unknown(
            "quantization on ROCm",
            f"vLLM {version}'s ROCm quantization list was not read (servepilot read 0.5.5 to 0.34.0)",
            "--engine-version of a release servepilot has read",
        ))
    return out
