"""SGLang's FP8 kernels on compute capability 8.0-8.8 (Ampere and Turing-era Ada siblings).

SGLang accepts FP8 checkpoints from compute capability 8.0 (Fp8Config.get_min_capability), but
Triton compiles FP8 E4M3 (fp8e4nv) only from 8.9. FP8 MoE experts always run a Triton kernel,
so such a model stops at its first forward; linear layers run Marlin W8A16 where the release
turns it on (automatically from 0.5.1, with vLLM installed until 0.5.6). The first forward is
CUDA-graph capture (or the warm-up request): after the weights are loaded and the KV cache is
allocated, so a weights OOM comes first (checks/result.py _STAGES).
"""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule
from servepilot.checks.unknowns import Unknown

KNOWLEDGE = "servepilot/engines/sglang/knowledge/quantization.yaml"
TRITON_SOURCE = ("triton/backends/nvidia/compiler.py@3.6.0 (CUDAOptions.parse_options: fp8e4nv "
                 "only for capability >= 89); triton/language/core.py@3.6.0")
# the first release whose FP8 linear layers run Marlin on 8.0-8.8 without vLLM installed
_OWN_MARLIN_FROM = "0.5.6"


@rule(
    "SP-QUANT-020", "quantization_support",
    "SGLang's FP8 kernels need compute capability 8.9 on this GPU",
    facts=(
        "Below compute capability 8.9 Triton has no fp8e4nv type: a Triton kernel with FP8 E4M3 "
        "operands fails to compile with 'type fp8e4nv not supported in this architecture'.",
        "SGLang's FP8 MoE experts (fp8 and compressed-tensors W8A8-FP8) run the Triton fused-MoE "
        "kernel with FP8 W8A8 in every release read (0.4.0-0.5.23): no Marlin path for FP8 "
        "experts.",
        "FP8 linear layers run Marlin W8A16 on 8.0-8.8 automatically from 0.5.1 (when vLLM is "
        "importable, until 0.5.6), before that only with SGLANG_FORCE_FP8_MARLIN=1 and never for "
        "block-quantized weights; otherwise block FP8 goes through Triton (fp8e4nv) and per-tensor "
        "FP8 through torch._scaled_mm, which needs 8.9.",
        "The error comes at the first forward (CUDA-graph capture or the warm-up request), after "
        "the weights are loaded.",
    ),
    sources=(KNOWLEDGE, TRITON_SOURCE,
             "sglang/srt/layers/quantization/fp8.py@v0.4.5.post3, @v0.5.4.post3, @v0.5.23"),
    engines=("sglang",),
)
def fp8_below_native(dep, ctx) -> list[Finding]:
    from servepilot.engines.sglang import quant

    res = ctx.resolution
    version = res.engine_version
    path = quant.fp8_below_native(dep, version, res.gpu_cc) if version else None
    if path is None:
        return []
    cc = f"{res.gpu_cc[0]}.{res.gpu_cc[1]}"
    evidence = (Evidence(f"FP8 paths of SGLang {version} below compute capability 8.9",
                         path.source),
                Evidence(f"{dep.cluster.gpus[0].name}: compute capability {cc}",
                         f"cluster ({dep.cluster.source})"),
                Evidence("Triton has fp8e4nv from compute capability 8.9", TRITON_SOURCE))
    if path.refusal:
        return [Finding("SP-QUANT-020", "quantization_support", "error",
                        f"FP8 {path.refused_part} cannot run on compute capability {cc} "
                        f"in SGLang {version}", _refusal_detail(path, version, cc),
                        evidence, tuple(_remedies(dep, path, version)))]
    if path.linear == "unknown":
        return [Finding("SP-QUANT-020", "quantization_support", "warning",
                        f"FP8 linear layers run on compute capability {cc} only if vLLM is "
                        f"installed beside SGLang {version}",
                        f"SGLang {version} takes its Marlin W8A16 kernels for FP8 from vLLM "
                        "(marlin_utils_fp8); vLLM is not one of its dependencies. Without it "
                        "the first forward fails: "
                        f"{quant.FP8E4NV_ERROR if path.block else quant.SCALED_MM_ERROR}",
                        evidence, tuple(_remedies(dep, path, version)))]
    return []


def _refusal_detail(path, version: str, cc: str) -> str:
    if path.refused_part == "MoE experts":
        kernel = ("SGLang runs FP8 experts through its Triton fused-MoE kernel with FP8 "
                  "activations and weights (no Marlin path for FP8 experts)")
    elif path.block:
        kernel = ("without Marlin the block-quantized linear layers run SGLang's Triton "
                  "block-FP8 GEMM")
    else:
        kernel = "without Marlin the per-tensor FP8 linear layers call torch._scaled_mm"
    return (f"{kernel}. On compute capability {cc} the weights load, then SGLang {version} stops "
            f"at its first forward (CUDA-graph capture, or the warm-up request): {path.refusal}")


def _remedies(dep, path, version: str) -> list[Remedy]:
    out = [Remedy("hardware", "GPUs with compute capability >= 8.9 (L4, L40S, RTX 4090, H100, ...)",
                  "different hardware", {"hardware": {"min_compute_capability": "8.9"}})]
    if path.refused_part == "MoE experts":
        out.append(Remedy("overlay", "a BF16, AWQ or GPTQ checkpoint of the same model (MoE "
                          "experts run Marlin or 16-bit kernels on this GPU)",
                          "another download; BF16 needs about twice the memory of FP8", None))
        return out
    from packaging.version import Version

    if Version(version) < Version(_OWN_MARLIN_FROM):
        out.insert(0, Remedy("upgrade", f"pip install 'sglang>={_OWN_MARLIN_FROM}'",
                             f"SGLang {_OWN_MARLIN_FROM}+ runs FP8 linear layers on its own Marlin "
                             "W8A16 kernels below 8.9; a new engine release to validate",
                             {"upgrade": {"package": "sglang",
                                          "specifier": f">={_OWN_MARLIN_FROM}"}}))
    out.append(Remedy("overlay", "a BF16, AWQ or GPTQ checkpoint of the same model",
                      "another download; BF16 needs about twice the memory of FP8", None))
    return out


def quant_unknowns(dep, ctx) -> list[Unknown]:
    """What check cannot know about SGLang's quantization kernels on this deployment."""
    from servepilot.engines.sglang import quant

    if dep.engine != "sglang" or dep.cluster.platform != "cuda":
        return []
    res = ctx.resolution
    version = res.engine_version
    if not version or res.gpu_cc is None:
        return []
    out = []
    method = quant.method_of(dep)
    if method and quant.method_row(method, version) is None:
        out.append(Unknown(
            "quantization kernels",
            f"the minimum compute capability SGLang {version} sets for {method} was not read",
            "a servepilot release that read this method for the engine version"))
    path = quant.fp8_below_native(dep, version, res.gpu_cc)
    if path is not None and path.refusal is None and path.linear == "unknown":
        out.append(Unknown(
            "FP8 linear kernels",
            f"SGLang {version} runs FP8 linear layers on Marlin below compute capability 8.9 "
            "only when vLLM is installed beside it",
            f"`pip show vllm` where SGLang runs, or SGLang >= {_OWN_MARLIN_FROM}"))
    return out
