"""Quantization method vs GPU: refused below the minimum capability, weight-only Marlin below native."""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/vllm/knowledge/quantization.yaml"


@rule(
    "SP-QUANT-001", "quantization_support", "Quantization method not supported on this GPU",
    facts=("vLLM refuses a quantization method below its get_min_capability(): 'The quantization method X is not supported for the current GPU. Minimum capability: N. Current capability: M.'",
           "Examples: AWQ needs 7.5, ModelOpt FP8 needs 8.9, Marlin variants 7.5 (8.0 before 0.14), mxfp4 8.0."),
    sources=(KNOWLEDGE, "vllm/config/vllm.py@v0.16.0 (VllmConfig._get_quantization_config)"),
    engines=(),
)
def quant_unsupported(dep, ctx) -> list[Finding]:
    q = ctx.resolution.quant
    if q is None or q.supported:
        return []
    gpu = dep.cluster.gpus[0].name if dep.cluster.gpus else "this GPU"
    return [Finding("SP-QUANT-001", "quantization_support", "error", f"{q.method} needs compute capability {q.min_cc / 10:.1f}+",
                    f"{gpu} is below the method's minimum. vLLM will raise: {q.error}",
                    (Evidence(f"{q.method}: minimum capability {q.min_cc}", q.source),),
                    (Remedy("hardware", f"GPUs with compute capability >= {q.min_cc / 10:.1f}", "different hardware", {"hardware": {"min_compute_capability": f"{q.min_cc / 10:.1f}"}}),
                     Remedy("overlay", "a checkpoint in another format (e.g. GPTQ or GGUF) of the same model", "another download; quality may differ", None)))]


@rule(
    "SP-QUANT-002", "quantization_support", "Quantized weights fall back to weight-only Marlin kernels",
    facts=("Below the native capability (FP8 W8A8 8.9; NVFP4 W4A4 families 10.x/12.x; MoE NVFP4 on SM90 too) vLLM runs the weights through Marlin weight-only kernels with 16-bit activations.",
           "Memory stays as small as the checkpoint; the matrix multiplications run at 16-bit tensor-core rates (FP8 is 2x, FP4 4x BF16 peak)."),
    sources=(KNOWLEDGE, "vllm/model_executor/layers/quantization/utils/nvfp4_utils.py@v0.16.0", "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py@v0.16.0", "vllm/model_executor/layers/quantization/fp8.py@v0.16.0"),
    engines=(),
)
def quant_fallback(dep, ctx) -> list[Finding]:
    from servepilot.engines import knowledge as kb

    res = ctx.resolution
    q = res.quant
    if q is None or not q.supported or not q.fallback:
        return []
    speed = kb.row_for(kb.load_file("vllm", "quantization")["speed"], "0.18.0")  # hardware ratios, not engine facts
    ratio = speed["fp4_over_bf16"] if "fp4" in q.method or "mxfp4" in q.method else speed["fp8_over_bf16"]
    parts = [f"linear: {q.linear}"] + ([f"MoE experts: {q.moe}"] if q.moe else [])
    findings = [Finding("SP-QUANT-002", "quantization_support", "warning", f"{q.method} runs weight-only (Marlin) on compute capability {res.gpu_cc[0]}.{res.gpu_cc[1]}",
                        f"No native {q.method} kernel for this GPU ({'; '.join(parts)}). The launch works and memory is unchanged, "
                        f"but activations stay 16-bit: up to {ratio}x less peak tensor-core throughput than the native path, "
                        "mostly felt in prefill and large batches (decode is bandwidth-bound).",
                        (Evidence(f"{q.method}: native from capability {q.native_min_cc}", q.source), Evidence(f"low-precision peak is {ratio}x BF16", speed.source)),
                        (Remedy("hardware", f"GPUs with native {q.method} kernels (compute capability >= {(q.native_min_cc or 0) / 10:.1f})", f"up to {ratio}x faster matmuls", {"hardware": {"min_compute_capability": f"{(q.native_min_cc or 0) / 10:.1f}"}}),))]
    return findings


def _marlin_tiles(dep, res, q) -> list[Finding]:
    """Marlin FP8 needs every sharded output dim divisible by 64 ('size_n = N is not divisible by tile_n_size = 64')."""
    if "fp8" not in q.method or dep.spec is None:
        return []
    tp = sizes.tp(dep.launch)
    dims = {"intermediate_size": dep.spec.intermediate_size, "moe intermediate size": dep.spec.moe.expert_intermediate_size if dep.spec.moe else None}
    bad = {k: v for k, v in dims.items() if v and (v // tp) % 64}
    if not bad:
        return []
    name, size = next(iter(bad.items()))
    return [Finding("SP-QUANT-003", "quantization_support", "error", "Marlin FP8 fallback cannot tile this model",
                    f"{name} {size} / TP {tp} = {size // tp} is not a multiple of 64: vLLM will raise 'size_n = {size // tp} is not divisible by tile_n_size = 64'.",
                    (Evidence(f"{name} = {size}", f"{dep.spec.path}/config.json"), Evidence("Marlin tile_n_size = 64", q.source)),
                    (Remedy("hardware", "GPUs with native FP8 (compute capability >= 8.9)", "native FP8 kernels have no such tiling limit", {"hardware": {"min_compute_capability": "8.9"}}),))]


@rule("SP-QUANT-003", "quantization_support", "Marlin FP8 fallback cannot tile this model",
      facts=("Marlin kernels tile the output dimension by 64; a sharded size not divisible by 64 fails at load.",),
      sources=(KNOWLEDGE,), engines=("vllm",))
def marlin_tiles(dep, ctx) -> list[Finding]:
    q = ctx.resolution.quant
    if q is None or not q.supported or not q.fallback:
        return []
    return _marlin_tiles(dep, ctx.resolution, q)
