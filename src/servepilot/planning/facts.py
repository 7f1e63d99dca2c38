"""Look up a versioned memory fact from planning/knowledge/<engine>_memory.yaml.

A fact is either one mapping (`{value: ..., source: ...}`) that holds for every version, or
a list of rows each carrying `versions` (a PEP 440 specifier on the release part of the
version: "0.16.0rc2" counts as 0.16.0, because facts are read from release tags) and a
`source`. The first row that holds wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class MemoryFact:
    """One fact that holds for the version asked about, with where it comes from."""

    name: str
    data: dict
    source: str
    versions: str = ""

    @property
    def value(self) -> Any:
        return self.data.get("value")

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


@lru_cache(maxsize=8)
def _load(engine: str) -> dict:
    from servepilot.datafile import load_yaml_resource

    return load_yaml_resource("servepilot.planning.knowledge", f"{engine}_memory.yaml") or {}


def release(version: str) -> str:
    """'0.16.0rc2' -> '0.16.0', 'v0.10.1.dev1+g12' -> '0.10.1'. ValueError when not a version."""
    from packaging.version import Version

    return ".".join(str(p) for p in Version(str(version).strip().lstrip("vV")).release)


def fact(engine: str, name: str, version: str) -> MemoryFact:
    """The fact `name` for `engine` at `version`; KeyError when the file has no row for it."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    node = _load(engine).get(name)
    if node is None:
        raise KeyError(f"{engine}_memory.yaml has no fact {name!r}")
    if isinstance(node, dict):
        return MemoryFact(name, node, str(node.get("source", f"{engine}_memory.yaml")))
    v = Version(release(version))
    for row in node:
        if v in SpecifierSet(str(row["versions"])):
            return MemoryFact(name, row, str(row["source"]), str(row["versions"]))
    raise KeyError(f"{engine}_memory.yaml: no row of {name!r} holds for version {version}")
