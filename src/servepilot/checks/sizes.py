"""Parallel sizes for rules: the launch's own reading (EngineLaunch, through the engine
registry's option names), with an unreadable value counted as 1.

The parse has already noted a value the engine rejects (`-tp abc`), and SP-ARGS reports it;
the other rules go on with one rank rather than stop the check.
"""

from __future__ import annotations

from servepilot.errors import CommandLineError


def _size(launch, prop: str) -> int:
    try:
        return max(1, getattr(launch, prop))
    except CommandLineError:
        return 1


def tp(launch) -> int:
    return _size(launch, "tensor_parallel_size")


def pp(launch) -> int:
    return _size(launch, "pipeline_parallel_size")


def dp(launch) -> int:
    return _size(launch, "data_parallel_size")
