"""Planner test fixtures (the builders live in planning_builders.py)."""

import pytest


@pytest.fixture(autouse=True)
def _no_resolver(monkeypatch):
    """Plan tests pin the KV dtype and block size themselves; the check layer's resolver is
    exercised by its own tests (and by test_plan_uses_resolution)."""
    import servepilot.planning.plan as plan_module

    monkeypatch.setattr(plan_module, "_try_resolve", lambda dep, notes: None)
