"""Turn the frozen dataclasses into plain JSON values for `--json` output."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any


def to_jsonable(value: Any) -> Any:
    """Recursively convert dataclasses, enums, paths and tuples into JSON-ready values.

    Dataclass fields whose metadata has `"json": False` are left out (big internal tables
    such as the per-tensor list of a checkpoint).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            if f.metadata.get("json", True) is False:
                continue
            out[f.name] = to_jsonable(getattr(value, f.name))
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    return value
