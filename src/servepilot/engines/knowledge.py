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


class KnowledgeRow:
    """One row of a fact file, typed by its section's schema (engines/<engine>/knowledge/schema.py).

    Fields are attributes (`row.values`, `row.min_cc`); a field the schema declares but this
    row leaves out reads as None, and a name the schema does not declare is an AttributeError
    naming the section, so a misspelt field fails where it is written, not in a later check.
    Rows built from plain dicts without a schema (tests, ad-hoc tables) accept any field.
    """

    __slots__ = ("data", "versions", "source", "_fields", "_where")

    def __init__(self, data: dict, versions: str, source: str, fields: frozenset | None = None, where: str = ""):
        self.data = data
        self.versions = versions
        self.source = source
        self._fields = fields
        self._where = where

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._field(name, AttributeError)

    def _field(self, name: str, error: type[Exception]) -> Any:
        if name in self.data:
            return self.data[name]
        if self._fields is None or name in self._fields:
            if self._fields is None and error is KeyError:
                raise KeyError(name)
            return None
        raise error(f"{self._where} rows have no field {name!r} (schema: {', '.join(sorted(self._fields))})")

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.data:
            return self.data[key]
        self._field(key, AttributeError)  # a field the schema does not declare is an error
        return default

    def __getitem__(self, key: str) -> Any:
        return self._field(key, KeyError)

    def __eq__(self, other) -> bool:
        return isinstance(other, KnowledgeRow) and (self.data, self.versions) == (other.data, other.versions)

    def __hash__(self) -> int:
        return hash((self.versions, self.source))

    def __repr__(self) -> str:
        return f"KnowledgeRow({self._where or 'row'}, versions={self.versions!r})"


# ---- schemas: what each section of a fact file holds ----------------------------------------


@dataclass(frozen=True)
class Rows:
    """A list of versioned rows (each with `versions` and `source`) with these fields."""

    fields: tuple[str, ...]


@dataclass(frozen=True)
class KeyedRows:
    """A mapping name -> list of versioned rows (backends by name, methods by name)."""

    fields: tuple[str, ...]


VALUE = "value"  # a plain value (a string, a list, a mapping of numbers), not rows


class KnowledgeFile:
    """A fact file, validated and typed: sections are attributes (`kv.valid_dtypes`).

    Versioned sections are tuples of KnowledgeRow (keyed sections: dicts of them); plain
    sections are the parsed values. `file["section"]` still works (the same checks)."""

    def __init__(self, where: str, sections: dict):
        self._where = where
        self._sections = sections

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._sections[name]
        except KeyError:
            raise AttributeError(f"{self._where} has no section {name!r}") from None

    def __getitem__(self, name: str) -> Any:
        try:
            return self._sections[name]
        except KeyError:
            raise KeyError(f"{self._where} has no section {name!r}") from None

    def get(self, name: str, default: Any = None) -> Any:
        return self._sections.get(name, default)

    def items(self):
        return self._sections.items()

    def __contains__(self, name: str) -> bool:
        return name in self._sections


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
        raise BadInput(f"engine version {text!r} is not a version number",
                       hint="e.g. --engine-version 0.16.0") from None


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


@lru_cache(maxsize=8192)
def version_in(version: str, specifier: str) -> bool:
    """Whether `version` (its release part) satisfies the PEP 440 `specifier` ("" = any).

    Cached, answers included: parsing one command line asks this for every row of a flag table
    (~1,500 rows for vLLM), with only a handful of distinct versions and specifiers.
    """
    if not specifier:
        return True
    return release_version(version) in _specifier(specifier)


@lru_cache(maxsize=64)
def load_file(engine: str, name: str) -> KnowledgeFile:
    """`servepilot/engines/<engine>/knowledge/<name>.yaml`, validated against its schema once
    and typed (see KnowledgeFile); a data error is a ValueError naming the file and the row."""
    from servepilot.datafile import load_yaml_resource

    package = f"servepilot.engines.{engine}.knowledge"
    try:
        data = load_yaml_resource(package, f"{name}.yaml") or {}
    except (FileNotFoundError, ModuleNotFoundError):
        raise BadInput(f"no knowledge file {name}.yaml for engine {engine}") from None
    return typed_file(data, _schema(engine, name), f"{engine}/knowledge/{name}.yaml")


def _schema(engine: str, name: str) -> dict:
    schema = _engine_schema(engine)
    if name not in schema:
        raise ValueError(f"{engine}/knowledge/{name}.yaml: no schema (add it to {engine}/knowledge/schema.py)")
    return schema[name]


def typed_file(data: Any, schema: dict, where: str) -> KnowledgeFile:
    """Check `data` against `schema` (section -> Rows | KeyedRows | VALUE) and type its rows."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping of sections, not {type(data).__name__}")
    sections: dict = {}
    for key, value in data.items():
        kind = schema.get(key)
        if kind is None:
            raise ValueError(f"{where}: unknown section {key!r} (known: {', '.join(schema)})")
        if isinstance(kind, Rows):
            sections[key] = _typed_rows(value, kind.fields, f"{where}:{key}")
        elif isinstance(kind, KeyedRows):
            if not isinstance(value, dict):
                raise ValueError(f"{where}:{key}: expected a mapping of name -> rows")
            sections[key] = {k: _typed_rows(v, kind.fields, f"{where}:{key}.{k}") for k, v in value.items()}
        else:
            _validate(value, f"{where}:{key}")
            sections[key] = value
    for key, kind in schema.items():  # a section the file leaves out reads as empty
        if key not in sections and kind is not VALUE:
            sections[key] = () if isinstance(kind, Rows) else {}
    return KnowledgeFile(where, sections)


def _typed_rows(rows: Any, fields: tuple[str, ...], where: str) -> tuple[KnowledgeRow, ...]:
    if not isinstance(rows, list):
        raise ValueError(f"{where}: expected a list of rows, not {type(rows).__name__}")
    known = frozenset(fields)
    out = []
    for index, row in enumerate(rows):
        here = f"{where}[{index}]"
        if not isinstance(row, dict):
            raise ValueError(f"{here}: a row must be a mapping")
        if "versions" not in row:
            raise ValueError(f"{here}: a row has no versions")
        _validate(row, here)
        extra = set(row) - known - {"versions", "source"}
        if extra:
            raise ValueError(f"{here}: unknown field {', '.join(sorted(map(str, extra)))} "
                             f"(known: {', '.join(sorted(known))})")
        out.append(KnowledgeRow(row, str(row["versions"]), str(row["source"]), known, where))
    return tuple(out)


def _validate(node: Any, where: str) -> None:
    """Every row that names `versions` must also name a `source`, and the specifier must parse."""
    if isinstance(node, dict):
        if "versions" in node:
            if not node.get("source"):
                raise ValueError(f"{where}: a row with versions {node['versions']!r} has no source")
            _check_specifier(str(node["versions"]), where)
        for value in node.values():
            _validate(value, where)
    elif isinstance(node, list):
        for value in node:
            _validate(value, where)


@lru_cache(maxsize=512)
def _check_specifier(text: str, where: str) -> None:
    from packaging.specifiers import InvalidSpecifier

    try:
        _specifier(text)
    except InvalidSpecifier as exc:
        raise ValueError(f"{where}: bad version specifier {text!r}") from exc


def _row(row: Any) -> KnowledgeRow:
    if isinstance(row, KnowledgeRow):
        return row
    return KnowledgeRow(row, str(row["versions"]), str(row["source"]))


def rows_for(rows, version: str) -> list[KnowledgeRow]:
    """Every row of `rows` whose `versions` holds for `version`, in file order."""
    return [_row(row) for row in rows if version_in(version,
                                                    str(row.versions if isinstance(row,
                                                                                   KnowledgeRow) else row["versions"]))]


def row_for(rows, version: str) -> KnowledgeRow | None:
    """The first row of `rows` whose `versions` holds for `version`, or None."""
    found = rows_for(rows, version)
    return found[0] if found else None


def known_range(engine: str) -> tuple[str, str]:
    """The oldest and newest engine release whose facts servepilot has read (engine.yaml)."""
    data = load_file(engine, "engine")
    return str(data.oldest_known), str(data.newest_known)


def is_known_version(engine: str, version: str) -> bool:
    """Whether `version` lies in the range of releases the knowledge files were read from."""
    from packaging.version import Version

    oldest, newest = known_range(engine)
    v = release_version(version)
    return Version(oldest) <= v and v.release[:2] <= Version(newest).release[:2]


def _engine_schema(engine: str) -> dict:
    """engines/<engine>/knowledge/schema.py's SCHEMA, imported with a plain import on first use."""
    match engine:
        case "vllm":
            from servepilot.engines.vllm.knowledge.schema import SCHEMA
        case "sglang":
            from servepilot.engines.sglang.knowledge.schema import SCHEMA
        case "llamacpp":
            from servepilot.engines.llamacpp.knowledge.schema import SCHEMA
        case _:
            raise ValueError(f"no knowledge schema for engine {engine!r}")
    return SCHEMA
