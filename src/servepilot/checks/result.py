"""run_checks(dep) -> CheckResult: every rule over one Deployment, errors first."""

from __future__ import annotations

from dataclasses import dataclass, field

from servepilot.checks.finding import Finding

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
# Within a severity, findings follow the order in which the engine would hit them, so the first
# error is the one the launch dies of: argument and config checks, then quantization and
# parallel layout (VllmConfig), then process and GPU set-up, then model init (attention
# backend), then weight loading and KV profiling (memory), then binding the port, then serving.
_STAGES = ("SP-KV-001", "SP-CODE", "SP-ARCH", "SP-LEN", "SP-QUANT-001", "SP-TP", "SP-EP", "SP-KV", "SP-GPU",
           "SP-CUDA", "SP-SHM", "SP-NCCL", "SP-ATTN", "SP-QUANT", "SP-MEM", "SP-PORT", "SP-TMPL")


def engine_stage(code: str) -> int:
    """The position of a finding's code in _STAGES (longest matching prefix); unknown codes last."""
    best = (len(_STAGES), 0)
    for i, prefix in enumerate(_STAGES):
        if code.startswith(prefix) and len(prefix) > best[1]:
            best = (i, len(prefix))
    return best[0]


@dataclass(frozen=True)
class CheckResult:
    verdict: str  # "pass" | "warn" | "fail"
    findings: tuple[Finding, ...]
    resolved: dict
    plan: dict | None = None
    notes: tuple[str, ...] = ()
    resolution: object = field(default=None, metadata={"json": False})

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")


def verdict_of(findings) -> str:
    severities = {f.severity for f in findings}
    if "error" in severities:
        return "fail"
    if "warning" in severities:
        return "warn"
    return "pass"


def run_checks(dep) -> CheckResult:
    """Run every registered rule that applies to `dep`'s engine; rank findings errors first."""
    from servepilot.checks.context import CheckContext
    from servepilot.checks.registry import load_rules

    ctx = CheckContext(dep)
    findings: list[Finding] = []
    for r in load_rules():
        if r.engines and dep.engine not in r.engines:
            continue
        findings.extend(r.func(dep, ctx) or ())
    findings.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], engine_stage(f.code), f.code))
    resolution = ctx.resolution
    return CheckResult(
        verdict=verdict_of(findings),
        findings=tuple(findings),
        resolved=resolution.summary(),
        plan=plan_summary(ctx.plan),
        notes=tuple(resolution.notes) + tuple(dep.notes or ()) + tuple(ctx.notes),
        resolution=resolution,
    )


def plan_summary(plan) -> dict | None:
    if plan is None:
        return None
    if hasattr(plan, "summary") and callable(plan.summary):
        return plan.summary()
    from servepilot.jsonable import to_jsonable

    value = to_jsonable(plan)
    return value if isinstance(value, dict) else {"plan": value}
