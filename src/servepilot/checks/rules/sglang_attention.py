"""SGLang's attention backend: the refusals its server_args and ModelRunner raise."""

from __future__ import annotations

import dataclasses

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/sglang/knowledge/attention.yaml"

# Backends tried as remedies, best first where they run (SGLang's own defaults lead).
_ALTERNATIVES = ("flashinfer", "fa3", "trtllm_mha", "trtllm_mla", "flashmla", "cutlass_mla", "triton")
_TRADEOFF = {
    "flashinfer": "FlashInfer kernels: SGLang's general default on CUDA",
    "fa3": "FlashAttention 3: SGLang's Hopper default",
    "trtllm_mha": "TensorRT-LLM kernels: SGLang's SM100 default for MHA models",
    "trtllm_mla": "TensorRT-LLM MLA kernels: page size 64",
    "flashmla": "FlashMLA kernels: page size 64",
    "cutlass_mla": "CUTLASS MLA kernels: page size 128",
    "triton": "Triton kernels run on every CUDA GPU; usually slower than the tuned backends",
}


@rule(
    "SP-ATTN-004", "attention_backend", "SGLang refuses the attention backend for this GPU or model",
    facts=(
        "SGLang 0.5.2 raises in ServerArgs for trtllm_mla/trtllm_mha off SM100; 0.5.10 accepts trtllm_mla on SM12x but "
        "needs SM100 for trtllm_mha prefill.",
        "FlashAttention 3 needs compute capability 9.x, or 8.x for MHA models: 'FlashAttention v3 Backend requires "
        "SM>=80 and SM<=90.'",
        "0.4.6 and 0.5.2 accept only a list of backends for MLA models ('Invalid attention backend for MLA: X').",
        "trtllm_mla takes only fp8_e4m3 or auto (0.5.10: also bf16, fp4_e2m1; 0.5.21: no "
        "fp4_e2m1) KV caches.",
        "0.4.4-0.4.5: fa3 needs SM>=90; 0.4.0-0.4.3 run every MLA model on triton. 0.5.19 "
        "takes trtllm_mha prefill on SM90/SM100/SM120, but no fp8_e4m3 KV cache on SM120; "
        "cutedsl_mla (0.5.13) needs SM100.",
        "Modelled for SGLang 0.4.0-0.5.23; other releases are an unknown, not a guess.",
    ),
    sources=(KNOWLEDGE, "sglang/srt/server_args.py@v0.5.2", "sglang/srt/server_args.py@v0.5.10.post1",
             "sglang/srt/model_executor/model_runner.py@v0.5.2",
             "sglang/srt/model_executor/model_runner.py@v0.4.4.post4",
             "sglang/srt/arg_groups/attention_hook.py@v0.5.19",
             "sglang/srt/arg_groups/overrides.py@v0.5.23"),
    engines=("sglang",),
)
def sglang_attention_refused(dep, ctx) -> list[Finding]:
    res = ctx.resolution
    if not res.fails:
        return []
    gpu = dep.cluster.gpus[0].name if dep.cluster.gpus else "the GPU"
    cc = f"{res.gpu_cc[0]}.{res.gpu_cc[1]}" if res.gpu_cc else "?"
    stage = res.extra.get("attention_stage")
    where = {"server_args": "while checking its arguments", "model_runner": "when the model runner starts",
             "backend_init": "when it builds the attention backend", "argparse": "while parsing the command line"}
    detail = [f"SGLang {res.engine_version} on {gpu} (compute capability {cc}) will stop "
              f"{where.get(stage, 'at start-up')}:", f"  {res.selection_error}",
              f"KV cache dtype: {res.kv_cache_dtype}; model: {'MLA' if res.use_mla else 'MHA'}."]
    evidence = tuple(Evidence(f.fact, f.source) for f in res.facts)
    return [Finding(
        code="SP-ATTN-004", category=res.extra.get("attention_category") or "attention_backend",
        severity="error",
        title=f"SGLang refuses --attention-backend {res.forced_backend} on compute capability {cc}"
        if res.forced_backend else f"SGLang's default attention backend is refused on compute capability {cc}",
        detail="\n".join(detail), evidence=evidence, remedies=tuple(_remedies(dep, ctx, res)),
    )]


def _remedies(dep, ctx, res) -> list[Remedy]:
    from servepilot.engines.sglang.resolve import resolve

    def again(**changes):
        opts = {k: v for k, v in dep.launch.options.items() if k not in changes or changes[k] is not None}
        opts.update({k: v for k, v in changes.items() if v is not None})
        launch = dataclasses.replace(dep.launch, options=opts)
        return resolve(dataclasses.replace(dep, launch=launch))

    out: list[Remedy] = []
    if res.extra.get("attention_category") == "kv_cache_dtype":
        for kv in ("fp8_e4m3", "auto"):
            alt = again(kv_cache_dtype=kv)
            if not alt.fails:
                out.append(Remedy("flag", f"--kv-cache-dtype {kv}",
                                  f"keeps {alt.attention_backend}; "
                                  + ("fp8 e4m3 KV cache, same size as e5m2" if kv != "auto" else "16-bit KV cache: "
                                                                                                 "twice the KV memory"),
                                  {"set": {"kv_cache_dtype": kv}, "unset": []}))
    default = None
    if res.forced_backend:
        alt = again(attention_backend=None)
        default = alt.attention_backend
        if not alt.fails:
            out.append(Remedy("flag", "drop --attention-backend",
                              f"SGLang picks {alt.attention_backend} itself",
                              {"set": {}, "unset": ["attention_backend"]}))
    mla_only, mha_only = {"trtllm_mla", "flashmla", "cutlass_mla"}, {"trtllm_mha"}
    for name in _ALTERNATIVES:
        if name in (mha_only if res.use_mla else mla_only):
            continue  # SGLang's constructors would fail later for the other attention kind
        if name in (res.forced_backend, default) or any(name in r.change for r in out):
            continue
        alt = again(attention_backend=name)
        if not alt.fails:
            out.append(Remedy("flag", f"--attention-backend {name}", _TRADEOFF[name],
                              {"set": {"attention_backend": name}, "unset": []}))
    return out[:4]
