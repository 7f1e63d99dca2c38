"""run_checks(dep) -> CheckResult: every rule over one Deployment, errors first."""

from __future__ import annotations

from dataclasses import dataclass, field

from servepilot.checks.finding import Finding

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


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
    findings.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], f.code))
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
