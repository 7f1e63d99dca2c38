"""A checkpoint saved already quantized by bitsandbytes cannot be split by tensor parallel (vLLM)."""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/vllm/knowledge/quantization.yaml"


@rule(
    "SP-QUANT-005", "quantization_support", "A pre-quantized bitsandbytes checkpoint with tensor parallel",
    facts=("vLLM's bitsandbytes loader keeps each pre-quantized tensor's quant state whole, so it refuses tensor "
           "parallel > 1 before loading a weight: 'Prequant BitsAndBytes models with tensor parallelism is not "
           "supported. Please try with pipeline parallelism.' (0.7.3 up to 0.27; the loader is gone in 0.28).",
           "In-flight quantization (--quantization bitsandbytes on a 16-bit checkpoint) is not affected."),
    sources=(KNOWLEDGE, "vllm/model_executor/model_loader/bitsandbytes_loader.py@v0.16.0"),
    engines=("vllm",),
)
def prequant_bnb_tensor_parallel(dep, ctx) -> list[Finding]:
    spec = dep.spec
    fact = ctx.resolution.release.bnb_prequant_tp
    tp = sizes.tp(dep.launch)
    if fact is None or spec is None or spec.quant is None or spec.quant.method != "bitsandbytes" or tp <= 1:
        return []
    gpus = tp * sizes.pp(dep.launch)
    return [Finding(
        "SP-QUANT-005", "quantization_support", "error",
        f"a pre-quantized bitsandbytes checkpoint cannot be split over {tp} GPUs",
        f"The checkpoint was saved quantized by bitsandbytes; vLLM {ctx.resolution.release.version} loads such "
        f"checkpoints only without tensor parallel and raises before any weight loads: {fact.message}",
        (Evidence("quantization_config.quant_method = bitsandbytes", f"{spec.path}/config.json"),
         Evidence(f"tensor parallel {tp} refused for pre-quantized bitsandbytes", fact.source)),
        (Remedy("flag", f"--tensor-parallel-size 1 --pipeline-parallel-size {gpus}",
                "the same GPUs as pipeline stages; each GPU holds whole layers",
                {"set": {"tensor_parallel_size": 1, "pipeline_parallel_size": gpus}, "unset": []}),
         Remedy("overlay", "the 16-bit checkpoint with --quantization bitsandbytes (quantized while loading)",
                "a larger download; in-flight quantization splits over tensor parallel", None)),
    )]
