"""Parse an engine's argv against its flag table, as the engine's argparse would.

Records where each option was written (token spans) so that `with_options` can replace a
flag in place, and keeps flags the table does not know (with their value) instead of failing.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from servepilot.engines.flagtable import NO_VALUE_KINDS, VersionTable, convert_value

_NUMBER = re.compile(r"-\d+(\.\d+)?")


@dataclass
class ParsedArgs:
    positionals: list[str] = field(default_factory=list)
    positional_spans: list[tuple[int, int]] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    explicit: set = field(default_factory=set)
    unknown_flags: list[str] = field(default_factory=list)
    spans: dict = field(default_factory=dict)  # dest -> [(start, end)] into the parsed args
    notes: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # the subset of notes argparse refuses

    def reject(self, problem: str) -> None:
        self.notes.append(problem)
        self.rejected.append(problem)


def looks_like_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NUMBER.fullmatch(token)


def _normalize(name: str, vt: VersionTable) -> str:
    """vLLM's FlexibleArgumentParser reads `--trust_remote_code` as `--trust-remote-code`
    (underscores become dashes up to the first '.'; vllm/utils/argparse_utils.py@v0.16.0)."""
    if vt.parser.get("underscores_as_dashes") and name.startswith("--"):
        head, dot, tail = name[2:].partition(".")
        return "--" + head.replace("_", "-") + dot + tail
    return name


def parse_args(args: Sequence[str], vt: VersionTable) -> ParsedArgs:
    """Read `args` (the engine's arguments, program words already removed)."""
    out = ParsedArgs()
    i = 0
    n = len(args)
    while i < n:
        token = args[i]
        if token == "--":
            for j in range(i + 1, n):
                out.positionals.append(args[j])
                out.positional_spans.append((j, j + 1))
            break
        if not looks_like_option(token):
            out.positionals.append(token)
            out.positional_spans.append((i, i + 1))
            i += 1
            continue
        i = _read_option(args, i, vt, out)
    return out


def _take_value(args: Sequence[str], i: int, inline: str | None) -> tuple[str | None, int]:
    """The value of the option at i (inline `=value` or the next token) and the next index."""
    if inline is not None:
        return inline, i + 1
    if i + 1 < len(args) and not looks_like_option(args[i + 1]):
        return args[i + 1], i + 2
    return None, i + 1


def _record(out: ParsedArgs, dest: str, start: int, end: int) -> None:
    out.explicit.add(dest)
    out.spans.setdefault(dest, []).append((start, end))


def _read_option(args: Sequence[str], i: int, vt: VersionTable, out: ParsedArgs) -> int:
    token = args[i]
    name, eq, inline = token.partition("=")
    inline_value = inline if eq else None
    name = _normalize(name, vt)

    # vLLM: -O3 / -O 3 / -O=3 is --optimization-level (v0.13+) or a compilation level before.
    if vt.parser.get("optimization_level_short") and name.startswith("-O") and not name.startswith("--"):
        return _read_optimization(args, i, name, inline_value, vt, out)

    if vt.parser.get("dotted_json_keys") and "." in name:
        return _read_dotted(args, i, name, inline_value, vt, out)

    spec, negated = vt.lookup(name)
    if spec is None:
        value, nxt = _take_value(args, i, inline_value)
        key = name.lstrip("-").replace("-", "_")
        out.unknown_flags.append(name)
        out.options[key] = True if value is None else value
        _record(out, key, i, nxt)
        return nxt

    dest = spec.dest
    if spec.kind in NO_VALUE_KINDS:
        value = not negated and spec.kind != "store_false"
        if inline_value is not None:
            out.reject(f"{name} takes no value; {token!r} is rejected by the engine's argparse")
            value = inline_value.strip().lower() not in ("false", "0", "no", "off")
        out.options[dest] = value
        _record(out, dest, i, i + 1)
        return i + 1

    if spec.kind in ("list", "append"):
        values: list[str] = []
        if inline_value is not None:
            values.append(inline_value)
            nxt = i + 1
        else:
            nxt = i + 1
            while nxt < len(args) and not looks_like_option(args[nxt]):
                values.append(args[nxt])
                nxt += 1
                if spec.kind == "append":
                    break
        if not values:
            out.reject(f"{name} expects a value and got none")
        if spec.kind == "append":
            out.options[dest] = list(out.options.get(dest) or []) + values
        else:
            out.options[dest] = values
        _record(out, dest, i, nxt)
        return nxt

    if spec.kind == "optional":  # argparse nargs="?": a value if one follows, else the const
        raw, nxt = _take_value(args, i, inline_value)
        out.options[dest] = True if raw is None else raw
        _record(out, dest, i, nxt)
        return nxt

    if spec.kind == "pair":
        values = list(args[i + 1 : i + 3])
        out.options[dest] = values
        _record(out, dest, i, i + 1 + len(values))
        return i + 1 + len(values)

    raw, nxt = _take_value(args, i, inline_value)
    if raw is None:
        out.reject(f"{name} expects a value and got none")
        out.options[dest] = None
        _record(out, dest, i, nxt)
        return nxt
    value, problem = convert_value(spec.kind, raw, dest)
    if problem:
        if "$" in raw:  # an unexpanded ${VAR}: the shell, not the engine, decides this value
            out.notes.append(problem)
        else:
            out.reject(problem)
    out.options[dest] = value
    _record(out, dest, i, nxt)
    return nxt


def _read_optimization(args, i, name, inline_value, vt: VersionTable, out: ParsedArgs) -> int:
    level = inline_value if inline_value is not None else name[2:]
    nxt = i + 1
    if not level and i + 1 < len(args) and args[i + 1] in ("0", "1", "2", "3"):
        level, nxt = args[i + 1], i + 2
    spec, _ = vt.lookup("--optimization-level")
    if spec is not None:
        out.options[spec.dest] = level
        _record(out, spec.dest, i, nxt)
    else:
        spec, _ = vt.lookup("-O")
        dest = spec.dest if spec is not None else "compilation_config"
        value, _problem = convert_value("json", level, dest)
        merged = dict(out.options.get(dest) or {}) if isinstance(out.options.get(dest), dict) else {}
        merged["level"] = value
        out.options[dest] = merged
        _record(out, dest, i, nxt)
    return nxt


def _read_dotted(args, i, name, inline_value, vt: VersionTable, out: ParsedArgs) -> int:
    """`--attention-config.backend=X`: a key of a JSON option, merged as vLLM merges it."""
    base, *keys = name.split(".")
    raw, nxt = _take_value(args, i, inline_value)
    if raw is None:
        raw = ""
    if keys and keys[-1].endswith("+"):
        keys[-1] = keys[-1][:-1]
        value: object = raw.split(",")
    else:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON; also 4300+ digit ints, deep nesting
            value = raw
    spec, _ = vt.lookup(base)
    if spec is None:
        key = name.lstrip("-").replace("-", "_")
        out.unknown_flags.append(name)
        out.options[key] = value
        _record(out, key, i, nxt)
        return nxt
    current = out.options.get(spec.dest)
    merged = copy.deepcopy(current) if isinstance(current, dict) else {}
    node = merged
    for k in keys[:-1]:
        child = node.get(k)
        if not isinstance(child, dict):
            child = node[k] = {}
        node = child
    if keys:
        node[keys[-1]] = value
    out.options[spec.dest] = merged
    _record(out, spec.dest, i, nxt)
    return nxt
