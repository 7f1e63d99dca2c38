"""Versioned engine facts, loaded from the YAML files under each engine's `knowledge/`.

A fact file holds rows; every row carries `versions` (a PEP 440 specifier such as
">=0.16.0,<0.18.0", evaluated with `packaging`) and `source` (file@tag or a PR URL). Code asks
for the rows that hold for one engine version; adding an engine release is editing data.

Pre-releases and dev builds ("0.16.0rc2", "0.10.1.dev101+gbda9d0535") are matched as the
release they lead to, because engine facts are read from release tags: a nightly of 0.16.0
behaves like 0.16.0 far more often than like 0.15.x.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from servepilot.errors import BadInput


@dataclass(frozen=True)
class Fact:
    """One row of a fact file that holds for the version asked about."""

    data: dict
    versions: str
    source: str

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


@lru_cache(maxsize=256)
def parse_version(text: str):
    """A packaging Version for an engine version string; BadInput when it is not one.

    "v0.16.0" and "0.16.0rc2" and "0.10.1.dev101+gbda9d0535" are accepted. This module is the
    one place engine version strings are read (engines.flagtable re-exports these functions).
    """
    from packaging.version import InvalidVersion, Version

    raw = str(text).strip().lstrip("vV")
    try:
        return Version(raw)
    except InvalidVersion:
        raise BadInput(f"engine version {text!r} is not a version number", hint="e.g. --engine-version 0.16.0") from None


@lru_cache(maxsize=256)
def release_version(text: str):
    """The release a version string leads to, as a Version: "0.16.0rc2" -> Version("0.16.0")."""
    from packaging.version import Version

    return Version(".".join(str(p) for p in parse_version(text).release))


def release_of(text: str) -> str:
    """The release a version string leads to: "0.16.0rc2" -> "0.16.0", "0.10.1.dev1+g" -> "0.10.1"."""
    return str(release_version(text))


@lru_cache(maxsize=256)
def _specifier(text: str):
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(text)


def version_in(version: str, specifier: str) -> bool:
    """Whether `version` (its release part) satisfies the PEP 440 `specifier` ("" = any).

    Both are cached: parsing one command line asks this for every row of a flag table (~1,500
    rows for vLLM), with only a handful of distinct versions and specifiers.
    """
    if not specifier:
        return True
    return release_version(version) in _specifier(specifier)


@lru_cache(maxsize=64)
def load_file(engine: str, name: str) -> dict:
    """The parsed YAML of `servepilot/engines/<engine>/knowledge/<name>.yaml`, validated."""
    from servepilot.datafile import load_yaml_resource

    package = f"servepilot.engines.{engine}.knowledge"
    try:
        data = load_yaml_resource(package, f"{name}.yaml") or {}
    except (FileNotFoundError, ModuleNotFoundError):
        raise BadInput(f"no knowledge file {name}.yaml for engine {engine}") from None
    _validate(data, f"{engine}/knowledge/{name}.yaml")
    return data


def _validate(node: Any, where: str) -> None:
    """Every row that names `versions` must also name a `source`, and the specifier must parse."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    if isinstance(node, dict):
        if "versions" in node:
            if not node.get("source"):
                raise ValueError(f"{where}: a row with versions {node['versions']!r} has no source")
            try:
                SpecifierSet(str(node["versions"]))
            except InvalidSpecifier as exc:
                raise ValueError(f"{where}: bad version specifier {node['versions']!r}") from exc
        for value in node.values():
            _validate(value, where)
    elif isinstance(node, list):
        for value in node:
            _validate(value, where)


def rows_for(rows: list[dict], version: str) -> list[Fact]:
    """Every row of `rows` whose `versions` holds for `version`, in file order."""
    return [Fact(row, str(row["versions"]), str(row["source"])) for row in rows if version_in(version, str(row["versions"]))]


def row_for(rows: list[dict], version: str) -> Fact | None:
    """The first row of `rows` whose `versions` holds for `version`, or None."""
    found = rows_for(rows, version)
    return found[0] if found else None


def known_range(engine: str) -> tuple[str, str]:
    """The oldest and newest engine release whose facts servepilot has read (engine.yaml)."""
    data = load_file(engine, "engine")
    return str(data["oldest_known"]), str(data["newest_known"])


def is_known_version(engine: str, version: str) -> bool:
    """Whether `version` lies in the range of releases the knowledge files were read from."""
    from packaging.version import Version

    oldest, newest = known_range(engine)
    v = release_version(version)
    return Version(oldest) <= v and v.release[:2] <= Version(newest).release[:2]
