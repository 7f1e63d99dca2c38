"""The V0 engine's FlashInfer backend on GPUs older than FlashAttention-2 (vLLM before 0.10.2)."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/vllm/knowledge/attention.yaml"


@rule(
    "SP-ATTN-008", "attention_backend", "Forced FlashInfer on the V0 engine needs FlashAttention-2's GPUs",
    facts=("The V0 FlashInfer backend runs the profiling pass, made before the KV cache exists, through "
           "FlashAttention-2, which raises 'FlashAttention only supports Ampere GPUs or newer.' below compute "
           "capability 8.0.",
           "Forcing VLLM_ATTENTION_BACKEND=FLASHINFER on such a GPU therefore fails at start-up (0.5.3-0.7.x, and "
           "0.10.0-0.10.1 where V1 falls back to V0 below 8.0); vLLM's own choice there (XFormers) runs."),
    sources=(KNOWLEDGE, "vllm/attention/backends/flashinfer.py@v0.7.3 (FlashInferImpl.forward)"),
    engines=("vllm",),
)
def flashinfer_v0_needs_fa2(dep, ctx) -> list[Finding]:
    fact = ctx.resolution.release.flashinfer_v0_fa2
    env = dep.launch.shell.env or {}
    cc = ctx.resolution.gpu_cc
    if fact is None or cc is None or str(env.get("VLLM_ATTENTION_BACKEND", "")).upper() != "FLASHINFER":
        return []
    if str(env.get("VLLM_USE_V1", "")).strip() in ("1", "true", "True"):
        return []  # the V1 engine's FlashInfer backend has no such profiling path
    if cc[0] * 10 + cc[1] >= fact.fa2_min_cc:
        return []
    version = ctx.resolution.release.version
    return [Finding(
        "SP-ATTN-008", "attention_backend", "error",
        f"forced FlashInfer cannot profile on compute capability {cc[0]}.{cc[1]}",
        f"VLLM_ATTENTION_BACKEND=FLASHINFER on vLLM {version}'s V0 engine runs its profiling pass through "
        f"FlashAttention-2, which needs compute capability {fact.fa2_min_cc / 10:.1f}. The engine will raise: "
        f"{fact.message}",
        (Evidence("VLLM_ATTENTION_BACKEND=FLASHINFER", "environment"),
         Evidence(f"V0 FlashInfer profiles through FlashAttention-2 (compute capability {fact.fa2_min_cc / 10:.1f}+)",
                  fact.source)),
        (Remedy("env", "unset VLLM_ATTENTION_BACKEND", "vLLM picks XFormers on this GPU itself",
                {"env": {"set": {}, "unset": ["VLLM_ATTENTION_BACKEND"]}}),),
    )]
