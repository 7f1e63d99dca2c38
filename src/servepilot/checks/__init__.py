"""Rules: small pure functions in one registry, each Deployment -> Findings.

Public: `run_checks(dep) -> CheckResult`, `rule` (the registering decorator).
"""

from __future__ import annotations


def run_checks(dep, measured: dict | None = None):
    """Run every rule over `dep` (a Deployment) and return a CheckResult."""
    from servepilot.checks.result import run_checks as _run

    return _run(dep, measured=measured)


def __getattr__(name):
    if name == "CheckResult":
        from servepilot.checks.result import CheckResult

        return CheckResult
    if name == "rule":
        from servepilot.checks.registry import rule

        return rule
    raise AttributeError(name)
