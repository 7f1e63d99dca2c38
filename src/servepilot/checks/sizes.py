"""Parallel sizes of a launch under each engine's own option names."""

from __future__ import annotations

# EngineLaunch.options uses the engine's dest names: vLLM tensor_parallel_size,
# SGLang ServerArgs tp_size / pp_size / dp_size (sglang/srt/server_args.py@v0.5.2).
_NAMES = {
    "tp": ("tensor_parallel_size", "tp_size"),
    "pp": ("pipeline_parallel_size", "pp_size"),
    "dp": ("data_parallel_size", "dp_size"),
}


def _size(launch, kind: str) -> int:
    for name in _NAMES[kind]:
        value = launch.options.get(name)
        if value not in (None, ""):
            try:
                return max(1, int(value))
            except (TypeError, ValueError):
                return 1
    return 1


def tp(launch) -> int:
    return _size(launch, "tp")


def pp(launch) -> int:
    return _size(launch, "pp")


def dp(launch) -> int:
    return _size(launch, "dp")
