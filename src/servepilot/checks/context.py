"""What a rule may read besides the Deployment: the engine's Resolution and, lazily, the memory plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property


def resolver_for(engine: str):
    """The engine's resolve module, from the engine registry."""
    from servepilot.engines.registry import engine_record

    return engine_record(engine).resolver


@dataclass
class CheckContext:
    dep: object
    notes: list[str] = field(default_factory=list)
    measured: dict | None = None  # the launch history's figures, given by the caller

    @cached_property
    def resolver(self):
        return resolver_for(self.dep.engine)

    @cached_property
    def resolution(self):
        from servepilot.engines.registry import engine_record

        return engine_record(self.dep.engine).resolve(self.dep)

    @cached_property
    def plan(self):
        """The planner's MemoryPlan, or None while planning is unavailable."""
        try:
            from servepilot.planning import plan_deployment
        except ImportError:
            return None
        from servepilot.errors import ServepilotError

        try:
            return plan_deployment(self.dep, resolution=self.resolution, measured=self.measured)
        except ServepilotError as exc:
            self.notes.append(f"memory plan not available: {exc.one_line()}")
            return None
