"""The port an engine's API server listens on when the command gives no --port."""

from __future__ import annotations

from servepilot.engines.registry import find_engine


def default_port(engine: str | None, program: str | None = None) -> int | None:
    record = find_engine(engine)
    if record is None:
        return None
    mod = record.logs
    for marker, port in getattr(mod, "DEFAULT_PORT_BY_PROGRAM", {}).items():
        if program and marker in program:
            return port
    return mod.DEFAULT_PORT
