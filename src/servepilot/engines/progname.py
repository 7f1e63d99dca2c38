"""Recognize how an engine was started: `vllm serve`, `python -m MODULE`, a binary's name."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")


def basename(word: str) -> str:
    return PurePosixPath(word).name


def python_module(argv: Sequence[str]) -> tuple[str, int] | None:
    """(module, index after it) for `python [-u ...] -m MODULE`, any interpreter path.

    Matches "python", "python3", "python3.11" and venv paths like /root/ml-env/bin/python3.
    """
    if not argv or not _PYTHON.fullmatch(basename(argv[0])):
        return None
    k = 1
    while k < len(argv) and argv[k].startswith("-") and argv[k] != "-m":
        if argv[k].startswith("-m") and len(argv[k]) > 2:  # -mvllm.entrypoints...
            return argv[k][2:], k + 1
        k += 1
    if k + 1 < len(argv) and argv[k] == "-m":
        return argv[k + 1], k + 2
    return None
