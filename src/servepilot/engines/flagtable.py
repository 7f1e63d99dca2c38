"""Engine flag tables (data files `engines/<engine>/knowledge/flags.json`) and an argv parser
that follows them the way each engine's own argparse would.

A table row is one option name (`--tensor-parallel-size`, `-tp`) with the dest it fills, the
kind of value it takes, the engine versions that have it (PEP 440) and the source it was read
from. Parsing never imports the engine; it only needs the table for one engine version.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

# One implementation of version matching (engines.knowledge); kept importable from here too.
from servepilot.datafile import resource_path
from servepilot.engines.knowledge import release_version as release_version
from servepilot.engines.knowledge import version_in as version_in

# Kinds that take no value on the command line.
NO_VALUE_KINDS = frozenset({"bool", "store_true", "store_false", "negate"})

_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")


@dataclass(frozen=True)
class FlagSpec:
    name: str  # "--tensor-parallel-size", "-tp"
    dest: str  # "tensor_parallel_size"
    kind: str  # see the "kinds" table of the data file
    versions: str  # PEP 440 specifier; "" = every sampled version
    source: str


@dataclass(frozen=True)
class FlagTable:
    """All rows of one engine's table, across versions."""

    engine: str
    rows: tuple[FlagSpec, ...]
    defaults: tuple[dict, ...]
    parser: dict
    sampled_versions: tuple[str, ...] = ()

    def for_version(self, version: str | None, program: str | None = None) -> VersionTable:
        """The rows that hold for `version` (None: the newest row of every name)."""
        key = (self.engine, self.rows[0].source if self.rows else "", len(self.rows), version, program)
        cached = _VERSION_TABLES.get(key)
        if cached is None:
            cached = _VERSION_TABLES[key] = self._for_version(version, program)
        return cached

    def _for_version(self, version: str | None, program: str | None) -> VersionTable:
        by_name: dict[str, FlagSpec] = {}
        for row in self.rows:
            if version is None or version_in(version, row.versions):
                # Rows are ordered oldest range first, so a later row is the newer meaning.
                by_name[row.name] = row
        defaults = {}
        for d in self.defaults:
            if d.get("program") not in (None, program):
                continue
            if version is None or version_in(version, d.get("versions", "")):
                defaults[d["dest"]] = d
        return VersionTable(self, version, by_name, defaults)

    def versions_of(self, name: str) -> list[str]:
        """The version ranges in which `name` exists (empty when the table never had it).

        Adjacent rows (a kind change at a sampled tag) are joined: "<0.10.1.1" and
        ">=0.10.1.1,<0.18.0" read as "<0.18.0".
        """
        ranges: list[list[str]] = []  # [lower, upper] clauses
        for row in self.rows:
            if row.name != name:
                continue
            clauses = [c for c in row.versions.split(",") if c]
            lower = next((c for c in clauses if c.startswith(">")), "")
            upper = next((c for c in clauses if c.startswith("<")), "")
            if ranges and ranges[-1][1] and lower and ranges[-1][1][1:] == lower.lstrip(">=").lstrip(">"):
                ranges[-1][1] = upper
            else:
                ranges.append([lower, upper])
        return [",".join(c for c in r if c) or "all sampled versions" for r in ranges]


# (engine, table identity, version, program) -> VersionTable: building one checks every row's
# specifier, which is most of the time spent parsing a command line.
_VERSION_TABLES: dict[tuple, VersionTable] = {}


@dataclass
class VersionTable:
    """One engine version's flags: lookup by name, canonical spelling per dest."""

    table: FlagTable
    version: str | None
    by_name: dict[str, FlagSpec]
    defaults: dict[str, dict]
    _long_names: list[str] = field(default_factory=list)

    def __post_init__(self):
        self._long_names = sorted(n for n in self.by_name if n.startswith("--"))

    @property
    def parser(self) -> dict:
        return self.table.parser

    def lookup(self, name: str) -> tuple[FlagSpec | None, bool]:
        """The row for an option as typed, and whether it is a `--no-` negation.

        Follows argparse: exact match first, then `--no-x` of a BooleanOptionalAction, then
        (where the engine's parser allows abbreviations) a unique prefix of a long name.
        """
        spec = self.by_name.get(name)
        if spec is not None:
            return spec, spec.kind == "negate"
        if name.startswith("--no-"):
            base = self.by_name.get("--" + name[5:])
            if base is not None and base.kind == "bool" and self.table.engine != "llama.cpp":
                return base, True
        if self.parser.get("allow_abbrev") and name.startswith("--") and len(name) > 3:
            matches = {self.by_name[n].dest: self.by_name[n] for n in self._long_names if n.startswith(name)}
            if len(matches) == 1:
                return next(iter(matches.values())), False
        return None, False

    def canonical_name(self, dest: str) -> str | None:
        """The long option to write for `dest`: the one spelled like the dest, else the longest."""
        names = [n for n, s in self.by_name.items() if s.dest == dest and s.kind != "negate"]
        if not names:
            return None
        spelled = "--" + dest.replace("_", "-")
        for candidate in (spelled, "--" + dest):
            if candidate in names:
                return candidate
        longs = [n for n in names if n.startswith("--")] or names
        return max(longs, key=len)

    def spec_for_dest(self, dest: str) -> FlagSpec | None:
        name = self.canonical_name(dest)
        return self.by_name.get(name) if name else None

    def default_values(self) -> dict:
        return {dest: d["value"] for dest, d in self.defaults.items()}


@lru_cache(maxsize=8)
def load_table(engine_package: str, key: str = "flags") -> FlagTable:
    """The flag table of `servepilot.engines.<engine_package>` (key: "flags" or another list)."""
    text = resource_path(f"servepilot.engines.{engine_package}", "knowledge/flags.json").read_text(encoding="utf-8")
    data = json.loads(text)
    rows = tuple(FlagSpec(r["name"], r["dest"], r["kind"], r.get("versions", ""), r["source"]) for r in data[key])
    return FlagTable(
        engine=data["engine"],
        rows=rows,
        defaults=tuple(data.get("defaults", ())),
        parser=data.get("parser", {}),
        sampled_versions=tuple(data.get("sampled_versions", ())),
    )


# ---- values -----------------------------------------------------------------------------

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_IEC = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT])i?B", re.IGNORECASE)


def human_int(text: str) -> tuple[int, str | None]:
    """vLLM's human_readable_int ("1k" = 1000, "1K" = 1024, "25.6k"), plus "20GiB"/"20GB".

    Returns (value, problem): vLLM itself rejects "20GiB" (vllm/engine/arg_utils.py@v0.16.0
    human_readable_int accepts one letter k/m/g/t or K/M/G/T), so such a value is read as the
    operator meant it and the problem is reported.
    """
    value = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix]), None
        if "." in number:
            return int(float(number) * _BINARY[suffix]), f"{text!r}: vLLM rejects decimals with binary suffixes"
        return int(number) * _BINARY[suffix], None
    m = _IEC.fullmatch(value)
    if m:
        number, letter = m.groups()
        binary = "i" in value.lower()
        mult = _BINARY[letter.upper()] if binary else _DECIMAL[letter.lower()]
        hint = f"{number}{letter.upper() if binary else letter.lower()}"
        return int(float(number) * mult), f"{text!r}: vLLM accepts {hint!r}, not {text!r}"
    return int(value), None


# What each kind of value looks like, in the operator's words (for the note on a bad value).
_KIND_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "human_int": "a whole number (vLLM also reads 32k = 32,000 and 32K = 32,768)",
    "human_int_or_auto": "a whole number, 32k / 32K, or auto",
    "json": "JSON",
}


def shown(value: object, limit: int = 80) -> str:
    """A value for a message: its repr, cut to `limit` characters with its full length said
    (a hostile 1 MB flag value must not become a 1 MB error line)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 3]}... ({len(text):,} characters)"


def convert_value(kind: str, raw: str, dest: str) -> tuple[object, str | None]:
    """A typed value for `raw`, and a problem in words when the engine would reject it.

    A value that is an unexpanded shell variable ("${MAX_NUM_SEQS}") is kept as text.
    """
    if _VARIABLE.search(raw) and kind not in ("str", "list", "append"):
        return raw, f"{dest} = {shown(raw)} is a shell variable that the command does not set"
    try:
        if kind == "int":
            return int(raw), None
        if kind == "float":
            return float(raw), None
        if kind == "human_int":
            return human_int(raw)
        if kind == "human_int_or_auto":
            if raw.strip().lower() in ("auto", "-1"):
                return -1, None
            return human_int(raw)
        if kind == "int_or_str":
            return (int(raw), None) if re.fullmatch(r"-?\d+", raw.strip()) else (raw, None)
        if kind == "bool_value":
            low = raw.strip().lower()
            if low in ("true", "1", "yes", "on"):
                return True, None
            if low in ("false", "0", "no", "off"):
                return False, None
            return raw, f"{dest} = {shown(raw)} is not a boolean"
        if kind == "json":
            stripped = raw.strip()
            if stripped[:1] in ("{", "["):
                return json.loads(stripped), None
            try:
                return json.loads(stripped), None
            except json.JSONDecodeError:
                return raw, None
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; deep nesting recurses
        what = _KIND_WORDS.get(kind, f"a {kind} value")
        return raw, f"{dest} = {shown(raw)} is not {what}: the engine's parser rejects it at start-up"
    return raw, None


def has_variable(text: str) -> bool:
    return bool(_VARIABLE.search(text))


# ---- value rules: what the engine accepts beyond the value's type ------------------------


@dataclass(frozen=True)
class ValueRule:
    """The choices or the bounds of one dest in a range of engine releases (the `values`
    list of flags.json, generated by flaggen from the engine's own field definitions)."""

    dest: str
    versions: str
    source: str
    choices: tuple = ()
    bounds: tuple[tuple[str, float], ...] = ()  # ("gt"|"ge"|"lt"|"le"|"min"|"max", number)

    def problem(self, value: object) -> str | None:
        """Why the engine refuses `value` (None: accepted, or not a value this rule judges)."""
        if isinstance(value, str) and has_variable(value):
            return None  # an unexpanded variable: its value is unknown here
        if self.choices:
            if isinstance(value, (list, dict)):
                return None
            if str(value) not in {str(c) for c in self.choices}:
                listed = ", ".join(str(c) for c in self.choices)
                return f"{shown(value)} is not one of the choices ({listed})"
        if self.bounds:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None  # the type itself is the parser's to judge (SP-ARGS-001)
            for op, limit in self.bounds:
                ok = {"gt": value > limit, "ge": value >= limit, "min": value >= limit,
                      "lt": value < limit, "le": value <= limit, "max": value <= limit}[op]
                if not ok:
                    return f"{shown(value)} is outside the accepted range ({self.range_text})"
        return None

    @property
    def range_text(self) -> str:
        words = {"gt": ">", "ge": ">=", "min": ">=", "lt": "<", "le": "<=", "max": "<="}
        return " and ".join(f"{words[op]} {limit:g}" for op, limit in self.bounds)


@lru_cache(maxsize=8)
def load_value_rules(engine_package: str) -> tuple[ValueRule, ...]:
    path = resource_path(f"servepilot.engines.{engine_package}", "knowledge/flags.json")
    text = path.read_text(encoding="utf-8")
    rules = []
    for r in json.loads(text).get("values", ()):
        bounds = tuple((op, r[op]) for op in ("gt", "ge", "lt", "le", "min", "max") if op in r)
        rules.append(ValueRule(r["dest"], r.get("versions", ""), r["source"], tuple(r.get("choices", ())), bounds))
    return tuple(rules)


def value_problems(engine: str, version: str | None, options: dict, dests) -> list[tuple[str, str, ValueRule]]:
    """(dest, problem, rule) for each of `dests` whose value the engine release refuses.

    Without a version only the rules that hold for every release apply: a choice list of
    one release must not condemn a value another release accepts.
    """
    package = engine.replace(".", "")
    try:
        rules = load_value_rules(package)
    except (ModuleNotFoundError, FileNotFoundError):
        return []
    out = []
    for dest in sorted(dests):
        if dest not in options:
            continue
        for rule in rules:
            if rule.dest != dest:
                continue
            applies = version_in(version, rule.versions) if version else rule.versions == ""
            if not applies:
                continue
            problem = rule.problem(options[dest])
            if problem:
                out.append((dest, problem, rule))
                break
    return out
