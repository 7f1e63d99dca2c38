"""SGLang's quantization kernels for one deployment (knowledge/quantization.yaml).

Two facts per release: the minimum compute capability each method's config declares (the loader
refuses below it, at model construction), and what FP8 weights run on compute capability
8.0-8.8, where Triton has no FP8 E4M3 type: Marlin W8A16 for the linear layers when the release
turns it on, Triton FP8 kernels otherwise, and Triton always for FP8 MoE experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.engines import knowledge as kb

ENGINE = "sglang"
# compute capability (major*10+minor) from which Triton has fp8e4nv
# (triton/backends/nvidia/compiler.py@3.6.0, CUDAOptions.parse_options)
TRITON_FP8E4NV_MIN_CC = 89
FP8E4NV_ERROR = ("ValueError: type fp8e4nv not supported in this architecture. "
                 "The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')")
SCALED_MM_ERROR = ("RuntimeError: torch._scaled_mm is only supported on CUDA devices with compute "
                   "capability >= 9.0 or 8.9, or ROCm MI300+")
# moe_runner_backend values under which FP8 experts take the Triton fused-MoE kernel
_TRITON_MOE_BACKENDS = (None, "auto", "triton")


@dataclass(frozen=True)
class Fp8BelowNative:
    """What FP8 weights run on a GPU of compute capability 8.0-8.8 under one SGLang release."""

    linear: str  # "marlin" | "triton" | "unknown" (Marlin only if vLLM is installed beside SGLang)
    moe: str | None  # "triton" (FP8 experts), None: no FP8 experts, or a backend not modelled
    refusal: str | None  # the first kernel's error when the launch dies at its first forward
    refused_part: str | None  # "MoE experts" | "linear layers"
    block: bool  # block-quantized weights (weight_block_size)
    source: str
    notes: tuple[str, ...] = ()


def method_of(dep) -> str | None:
    """servepilot's key for the method SGLang runs: --quantization, else the checkpoint's."""
    method = dep.launch.options.get("quantization")
    spec = dep.spec
    if not method and spec is not None and spec.quant is not None:
        method = spec.quant.method
        if method == "modelopt":
            nvfp4 = (spec.quant.quant_algo or "").upper() == "NVFP4"
            method = "modelopt_fp4" if nvfp4 else "modelopt"
    return str(method) if method else None


def method_row(method: str, version: str):
    """The get_min_capability row of `method` in `version`, or None (not read)."""
    return kb.row_for(kb.load_file(ENGINE, "quantization").methods.get(method, []), version)


def fp8_below_native(dep, version: str, cc: tuple[int, int] | None) -> Fp8BelowNative | None:
    """The FP8 kernel paths on compute capability 8.0-8.8, or None when they do not apply
    (another method, another GPU, a release not read, or a model servepilot has not read)."""
    value = cc[0] * 10 + cc[1] if cc else None
    if value is None or not 80 <= value < TRITON_FP8E4NV_MIN_CC or dep.spec is None:
        return None
    method = method_of(dep)
    spec = dep.spec
    ct_fp8 = (method == "compressed-tensors" and spec.quant is not None
              and (spec.quant.quant_algo or "") == "FP8")
    if method != "fp8" and not ct_fp8:
        return None
    row = kb.row_for(kb.load_file(ENGINE, "quantization").fp8_below_native, version)
    if row is None:
        return None
    notes = []
    backend = dep.launch.options.get("moe_runner_backend")
    moe = None
    if spec.is_moe:
        if backend in _TRITON_MOE_BACKENDS:
            moe = "triton"
        else:
            notes.append(f"--moe-runner-backend {backend} with FP8 experts on compute capability "
                         f"{cc[0]}.{cc[1]} is not modelled")
    # --quantization fp8 on a 16-bit checkpoint quantizes online, per tensor
    block = bool(method == "fp8" and spec.quant is not None and spec.quant.method == "fp8"
                 and spec.quant.weight_block_size)
    if ct_fp8:
        linear = "not modelled"  # compressed-tensors picks its own linear scheme (W8A16 below 8.9)
    else:
        linear = _fp8_linear(dep, row, block)
    refusal, part = None, None
    if moe == "triton":
        refusal, part = FP8E4NV_ERROR, "MoE experts"
    elif linear == "triton":
        refusal, part = (FP8E4NV_ERROR if block else SCALED_MM_ERROR), "linear layers"
    return Fp8BelowNative(linear=linear, moe=moe, refusal=refusal, refused_part=part, block=block,
                          source=row.source, notes=tuple(notes))


def _fp8_linear(dep, row, block: bool) -> str:
    env = dep.launch.shell.env or {}
    # get_bool_env_var: "1" or "true", any case
    forced = str(env.get("SGLANG_FORCE_FP8_MARLIN", "")).lower() in ("1", "true")
    marlin = bool(row.auto_marlin) or (bool(row.env_marlin) and forced)
    if block and not row.block_marlin:
        marlin = False
    if not marlin:
        return "triton"
    return "unknown" if row.marlin_needs_vllm else "marlin"
