"""run_checks(dep) -> CheckResult: every rule over one Deployment, errors first."""

from __future__ import annotations

from dataclasses import dataclass, field

from servepilot.checks.finding import Finding

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
# Within a severity, findings follow the order in which the engine would hit them, so the first
# error is the one the launch dies of:
#   1. argument parsing (SP-ARGS-001: flags and values argparse refuses; SP-KV-001: a
#      --kv-cache-dtype value the version lacks);
#   2. ModelConfig: reading config.json (SP-CODE), resolving the architecture (SP-ARCH), the
#      platform's quantization list (SP-ROCM-001: ModelConfig._verify_quantization), the
#      derived max_model_len (SP-LEN);
#   2b. 0.8-0.9 only: create_engine_config's V1 oracle right after ModelConfig (SP-V1: with
#      VLLM_USE_V1=1 a feature V1 lacks raises, vllm/engine/arg_utils.py@v0.8.0);
#   3. VllmConfig.__post_init__ (0.5.1-0.6.2: the pipeline-parallel architecture list, SP-PP,
#      right after the heads/TP check in verify_with_parallel_config, vllm/config.py@v0.6.2):
#      verify_with_parallel_config (SP-TP, SP-EP) runs before
#      _get_quantization_config (SP-QUANT-001, the minimum capability), then KV/cache settings
#      (vllm/config/vllm.py@v0.16.0); then the tokenizer (SP-CODE-003), which the front end
#      loads before it starts the engine core's workers (vllm/v1/engine/async_llm.py@v0.16.0);
#   4. worker start: device and dtype (SP-GPU, SP-CUDA, SP-DTYPE), NCCL init (SP-SHM, SP-NCCL);
#   5. model construction: each Attention layer selects its backend in __init__ (SP-ATTN), the
#      quantized linear layers check their kernel shapes (SP-QUANT-00x); weights are allocated
#      layer by layer after the first attention layer is built, so an attention error comes
#      before a weights OOM;
#   6. weight loading and KV profiling (SP-MEM-001 weights; SP-MOE, the expert weights re-laid
#      for the MoE kernel once loaded (process_weights_after_loading), like SP-QUANT-003's FP8
#      Marlin repack; SP-ROCM-007, AITER's
#      MXFP4 re-quantization of MLA weights there; the profiling run's first forward pass:
#      SP-ROCM-005 (FP8 GEMMs of the first linear layer), SP-ROCM-006 (Triton attention
#      kernels compiled for the GPU; SP-ROCM-009 the MoE kernel); SP-QUANT-007, GPTQ/AWQ
#      experts on the MoE WNA16 CUDA kernel, fails at CUDA-graph capture, after the KV cache
#      checks; SP-ATTN-008, the V0
#      FlashInfer backend's profiling pass through FlashAttention-2; SP-MEM-003 no KV budget
#      left, then SP-MEM-002 one max_model_len request larger than the KV cache:
#      check_enough_kv_cache_memory);
#   6b. SGLang's first forward (CUDA-graph capture, or the warm-up request): a Triton FP8
#      kernel on compute capability < 8.9 fails to compile there (SP-QUANT-020), after the
#      weights are loaded and the KV cache is allocated;
#   7. binding the API port (SP-PORT), then serving: the first request (SP-ATTN-012, LMCache's V0
#      adapter meeting a backend it does not take; SP-TMPL, the first chat request).
# llama.cpp's GGUF refusals (SP-GGUF: the file's tensor types, read by gguf_init; the
# architecture, expert count and pre-tokenizer, read by llama_model_load's load_arch /
# load_hparams / load_vocab, src/llama-model.cpp@0c1e57098) come before it allocates a byte of
# weights, KV cache or compute buffers: they sort with the architecture (stage 2).
# SP-CODE-002 as a warning (the custom code --trust-remote-code will run, all files present)
# stops nothing and degrades nothing: a review note, so it sorts after every finding that does.
# As an error (a file is missing) it is the config import failing, at the SP-CODE stage.
_STAGES = ("SP-ARGS", "SP-KV-001", "SP-CODE", "SP-ARCH", "SP-GGUF", "SP-ROCM-001",
           "SP-LEN", "SP-V1", "SP-TP", "SP-PP", "SP-EP", "SP-QUANT-001", "SP-ROCM-008", "SP-KV",
           "SP-CODE-003", "SP-GPU",
           "SP-CUDA", "SP-ROCM-004", "SP-DTYPE", "SP-SHM", "SP-NCCL", "SP-ATTN",
           "SP-ROCM-002", "SP-ROCM-003", "SP-QUANT",
           "SP-CKPT", "SP-MEM-001", "SP-QUANT-003", "SP-MOE", "SP-ROCM-007", "SP-ROCM-005",
           "SP-ROCM-006", "SP-ROCM-009", "SP-ATTN-008", "SP-MEM-003",
           "SP-MEM-002", "SP-MEM", "SP-QUANT-007", "SP-QUANT-020", "SP-PORT", "SP-ATTN-012", "SP-TMPL")
_REVIEW_NOTES = ("SP-CODE-002",)


def finding_stage(f: Finding) -> int:
    """engine_stage of the finding's code; a review note that is not an error comes after all stages."""
    if f.code in _REVIEW_NOTES and f.severity != "error":
        return len(_STAGES)
    return engine_stage(f.code)


def engine_stage(code: str) -> int:
    """The position of a finding's code in _STAGES (longest matching prefix); unknown codes last."""
    best = (len(_STAGES), 0)
    for i, prefix in enumerate(_STAGES):
        if code.startswith(prefix) and len(prefix) > best[1]:
            best = (i, len(prefix))
    return best[0]


@dataclass(frozen=True)
class CheckResult:
    verdict: str  # "pass" | "warn" | "fail" | "unknown"
    findings: tuple[Finding, ...]
    resolved: dict
    plan: dict | None = None
    notes: tuple[str, ...] = ()
    resolution: object = field(default=None, metadata={"json": False})  # the typed Resolution
    memory_plan: object = field(default=None, metadata={"json": False})  # the typed MemoryPlan
    unknowns: tuple = ()  # checks/unknowns.Unknown: facts a rule needed and could not have
    model_summary: dict = field(default_factory=dict)  # checkpoint/summary.py, as inspect prints it
    unchecked: tuple = ()  # checks/unchecked.py: facts only a start of the engine settles

    JSON_SCHEMA = "servepilot.check/1"

    def to_json(self) -> dict:
        """The JSON object of docs/json/check.md, without the "schema" key (the CLI adds it)."""
        from servepilot.jsonable import to_jsonable

        return to_jsonable({
            "verdict": self.verdict,
            "findings": list(self.findings),
            "resolved": self.resolved,
            "plan": self.plan,
            "notes": list(self.notes),
            "unknowns": [{"fact": u.fact, "why": u.why, "settle": u.settle} for u in self.unknowns],
            "model_summary": self.model_summary,
            "unchecked": [{"fact": u.fact, "why": u.why, "settle": u.settle} for u in self.unchecked],
        })

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")


def verdict_of(findings, unknowns=()) -> str:
    """fail on any error (the launch dies whatever is unknown); else unknown when a fact a
    rule needs could not be established; else warn / pass."""
    severities = {f.severity for f in findings}
    if "error" in severities:
        return "fail"
    if unknowns:
        return "unknown"
    if "warning" in severities:
        return "warn"
    return "pass"


def run_checks(dep, measured: dict | None = None) -> CheckResult:
    """Run every registered rule that applies to `dep`'s engine; rank findings errors first.

    measured: figures from earlier launches for the memory plan (runs.store.measurement_for)."""
    from servepilot.checks.context import CheckContext
    from servepilot.checks.platforms import rule_applies
    from servepilot.checks.registry import load_rules

    ctx = CheckContext(dep, measured=measured)
    findings: list[Finding] = []
    for r in load_rules():
        if r.engines and dep.engine not in r.engines:
            continue
        if not rule_applies(r, dep.cluster.platform):
            continue  # a CUDA fact on another GPU platform: platforms.py names the unknown
        findings.extend(r.func(dep, ctx) or ())
    findings.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], finding_stage(f), f.code))
    findings = _download_before_overlay(dep, findings)
    resolution = ctx.resolution
    from servepilot.checks.unchecked import unchecked_of
    from servepilot.checks.unknowns import unknowns_of

    ctx.plan  # noqa: B018 - the plan's own failure is one of the unknowns
    from servepilot.checks.platforms import platform_unknowns

    unknowns = tuple(unknowns_of(dep, ctx)) + tuple(platform_unknowns(dep, ctx))
    return CheckResult(
        verdict=verdict_of(findings, unknowns),
        findings=tuple(findings),
        resolved=resolution.summary(),
        plan=plan_summary(ctx.plan),
        notes=tuple(resolution.notes) + tuple(dep.notes or ()) + tuple(ctx.notes),
        resolution=resolution,
        memory_plan=ctx.plan,
        unknowns=unknowns,
        model_summary=_summary(dep.spec),
        unchecked=tuple(unchecked_of(dep, resolution)),
    )


def _download_before_overlay(dep, findings: list[Finding]) -> list[Finding]:
    """A model read from the Hub (headers only) has no files to overlay yet: its overlay
    remedies say to download it first, with the `hf download` line."""
    from servepilot.checkpoint.remote import view_of

    view = view_of(dep.spec.path) if dep.spec is not None else None
    if view is None:
        return findings
    from dataclasses import replace

    first = f"download first ({view.download_command}), then "
    out = []
    for f in findings:
        remedies = tuple(replace(r, change=first + r.change) if r.kind == "overlay" else r for r in f.remedies)
        out.append(replace(f, remedies=remedies))
    return out


def _summary(spec) -> dict:
    from servepilot.checkpoint.summary import model_summary

    return model_summary(spec)


def plan_summary(plan) -> dict | None:
    if plan is None:
        return None
    if hasattr(plan, "summary") and callable(plan.summary):
        return plan.summary()
    from servepilot.jsonable import to_jsonable

    value = to_jsonable(plan)
    return value if isinstance(value, dict) else {"plan": value}
