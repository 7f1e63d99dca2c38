"""Known model families, from the data table data/families.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("data") / "families.json"


@dataclass(frozen=True)
class Family:
    family: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    attention: str | None  # "mla" | "standard" | "sliding"; None for wrappers
    wrapper: bool = False
    sparse: bool = False
    gguf_architectures: tuple[str, ...] = ()  # llama.cpp's general.architecture names
    source: str = ""


@lru_cache(maxsize=1)
def families() -> tuple[Family, ...]:
    rows = json.loads(DATA.read_text())["families"]
    return tuple(
        Family(
            family=r["family"],
            model_types=tuple(r.get("model_types", ())),
            architectures=tuple(r.get("architectures", ())),
            attention=r.get("attention"),
            wrapper=bool(r.get("wrapper", False)),
            sparse=bool(r.get("sparse", False)),
            gguf_architectures=tuple(r.get("gguf_architectures", ())),
            source=r.get("source", ""),
        )
        for r in rows
    )


def find_family(model_type: str | None, architectures: tuple[str, ...] = ()) -> Family | None:
    """The family whose model_types hold `model_type`, else whose architectures hold one given."""
    if model_type:
        for fam in families():
            if model_type in fam.model_types:
                return fam
    for fam in families():
        if any(a in fam.architectures for a in architectures):
            return fam
    return None


def find_gguf_family(architecture: str | None) -> Family | None:
    """The family of a GGUF file's general.architecture (llama.cpp's name, e.g. "qwen3moe")."""
    if not architecture:
        return None
    for fam in families():
        if architecture in fam.gguf_architectures:
            return fam
    return None
