"""Which llama.cpp builds know a GGUF's architecture, BPE pre-tokenizer and tensor types.

The facts are llama.cpp's own tables read per build (knowledge/build_facts.json, written by
tools/llamacpp_build_facts.py): LLM_ARCH_NAMES (general.architecture), the pre-tokenizer
names its BPE vocabulary loader compares tokenizer.ggml.pre with, and enum ggml_type. Two
tables: llama.cpp release trees keyed by build number (what `llama-server --version` prints),
and the llama.cpp that each llama-cpp-python release vendors, keyed by its version.

A build between two builds read is judged only when both agree; anything else is undecided
and says why, so that check can name it as unknown instead of passing it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from servepilot.datafile import resource_path

KNOWLEDGE = "servepilot/engines/llamacpp/knowledge/build_facts.json"
TABLE_WORDS = {"llama_cpp": "llama.cpp", "llama_cpp_python": "llama-cpp-python"}
KIND_WORDS = {
    "architectures": "architecture",
    "pre_tokenizers": "pre-tokenizer",
    "ggml_types": "tensor type",
}


@lru_cache(maxsize=1)
def facts() -> dict:
    path = resource_path("servepilot.engines.llamacpp", "knowledge/build_facts.json")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class Build:
    """The llama.cpp the user runs: a build number, or a llama-cpp-python release."""

    table: str  # "llama_cpp" | "llama_cpp_python"
    key: object  # int build number | packaging Version
    text: str  # as given: "5061", "0.3.8"

    @property
    def words(self) -> str:
        return (
            f"llama.cpp b{self.key}"
            if self.table == "llama_cpp"
            else f"llama-cpp-python {self.text}"
        )


def build_of(program: str, version: str | None) -> Build | None:
    """The build a version string names for the program: llama-server and llama-cli take llama.cpp
    build numbers ("5061", "b5061", "5061 (916c83bf)"); `python -m llama_cpp.server` takes the
    llama-cpp-python release. None when the string names neither."""
    if not version:
        return None
    if "llama_cpp.server" in program:
        from packaging.version import InvalidVersion, Version

        try:
            return Build("llama_cpp_python", Version(version), version)
        except InvalidVersion:
            return None
    m = re.fullmatch(r"\s*b?(\d{3,6})(?:\s*\(\w+\))?\s*", version)
    return Build("llama_cpp", int(m.group(1)), version) if m else None


@dataclass(frozen=True)
class Judgement:
    status: str  # "known" | "unknown_name" (the build rejects it) | "undecided"
    why: str  # the reads it rests on, in words
    first: object = None  # the first snapshot key with the name, if any
    source: str = KNOWLEDGE


def _key(table: str, raw):
    if table == "llama_cpp":
        return int(raw)
    from packaging.version import Version

    return Version(str(raw))


def _label(table: str, key) -> str:
    return f"b{key}" if table == "llama_cpp" else str(key)


def judge(kind: str, name: str, build: Build | None) -> Judgement:
    """Whether the build accepts `name` as a `kind` (architectures, pre_tokenizers, ggml_types)."""
    tables = [build.table] if build is not None else ["llama_cpp", "llama_cpp_python"]
    if build is None:
        # no build known: only a name every build read accepts (both tables) can pass
        universal = [_universal(t, kind, name) for t in tables]
        if all(universal):
            return Judgement("known", universal[0])
        return Judgement(
            "undecided",
            "no llama.cpp build was given, and not every build read accepts it",
            _first(tables[0], kind, name),
        )
    return _judge_in(build.table, kind, name, build.key)


def _snapshots(table: str) -> list[dict]:
    return facts()[table]["snapshots"]


def _present(table: str, kind: str, name: str) -> list[bool | None]:
    """Per snapshot: True/False whether it accepts the name; None where it does not check
    (a pre-tokenizer before llama.cpp compared the names)."""
    row = facts()[table][kind].get(name)
    out: list[bool | None] = []
    for snap in _snapshots(table):
        if kind == "pre_tokenizers" and not snap["checks_pre_tokenizer"]:
            out.append(None)
            continue
        if row is None:
            out.append(False)
            continue
        key = _key(table, snap["key"])
        inside = _key(table, row["first"]) <= key <= _key(table, row["last"])
        out.append(inside and snap["key"] not in row.get("absent_in", ()))
    return out


def _universal(table: str, kind: str, name: str) -> str | None:
    """Words for a name that every snapshot read accepts (or ignores), else None."""
    present = _present(table, kind, name)
    if any(p is False for p in present):
        return None
    snaps = _snapshots(table)
    return (
        f"every {TABLE_WORDS[table]} read ({_label(table, snaps[0]['key'])} to "
        f"{_label(table, snaps[-1]['key'])}) accepts it"
    )


def _first(table: str, kind: str, name: str):
    row = facts()[table][kind].get(name)
    return _key(table, row["first"]) if row else None


def _judge_in(table: str, kind: str, name: str, key) -> Judgement:
    snaps = _snapshots(table)
    keys = [_key(table, s["key"]) for s in snaps]
    present = _present(table, kind, name)
    row = facts()[table][kind].get(name)
    first = _key(table, row["first"]) if row else None
    source = row["source"] if row else KNOWLEDGE
    word = KIND_WORDS[kind]
    read = f"{TABLE_WORDS[table]} {_label(table, keys[0])} to {_label(table, keys[-1])}"
    if key < keys[0] or key > keys[-1]:
        universal = _universal(table, kind, name)
        if universal:
            return Judgement("known", universal, first, source)
        return Judgement(
            "undecided", f"{_label(table, key)} is outside the builds read ({read})", first, source
        )
    i = max(j for j, k in enumerate(keys) if k <= key)
    at = [i] if keys[i] == key else [i, i + 1]
    states = {present[j] for j in at}
    names = " and ".join(_label(table, keys[j]) for j in at)
    if states == {None}:
        return Judgement("known", f"{names} do not check the {word} name", first, source)
    if states == {True}:
        return Judgement("known", f"{names} accept it", first, source)
    if states == {False}:
        since = (
            f"; first read in {_label(table, first)}"
            if first is not None
            else f"; in no build read ({read})"
        )
        return Judgement("unknown_name", f"{names} lack it{since}", first, source)
    return Judgement(
        "undecided",
        f"{_label(table, key)} lies between {names}, which disagree on it",
        first,
        source,
    )


def read_range(table: str) -> str:
    snaps = _snapshots(table)
    first, last = (_key(table, snaps[i]["key"]) for i in (0, -1))
    return f"{_label(table, first)}-{_label(table, last)}"


# ---- LLAMA_MAX_EXPERTS ---------------------------------------------------------------------
# The model loader asserts GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS) (llama.cpp,
# src/llama.cpp, later src/llama-model.cpp): a GGUF with more experts than the build's compile-time
# limit aborts the load. The limit is read per build (a snapshot's "max_experts"; null where the
# tree defines none, before MoE support; a snapshot without the field was not read for it).


def _expert_reads(table: str) -> list[tuple[object, int | None, str]]:
    """(key, LLAMA_MAX_EXPERTS or None, file@tag) of the snapshots read for it, in key order."""
    out = []
    for snap in _snapshots(table):
        if "max_experts" not in snap:
            continue
        where = snap["files"].get("max_experts") or "no LLAMA_MAX_EXPERTS"
        source = f"{where}@{snap['tag']}" if "tag" in snap else f"{where} in {snap['label']}"
        out.append((_key(table, snap["key"]), snap["max_experts"], source))
    return out


def _admits(limit: int | None, n_expert: int) -> bool:
    return limit is None or n_expert <= limit


def judge_experts(n_expert: int, build: Build | None) -> Judgement:
    """Whether the build's LLAMA_MAX_EXPERTS admits a GGUF with `n_expert` experts.

    status: known (admits), too_many (the load aborts) or undecided. `first` is the first build
    read whose limit admits it. The limit only ever grew in the builds read, so a build newer
    than the last read admits what the last read admits.
    """
    tables = [build.table] if build is not None else ["llama_cpp", "llama_cpp_python"]
    reads = {t: _expert_reads(t) for t in tables}
    if not any(reads.values()):
        return Judgement("undecided", "LLAMA_MAX_EXPERTS was read in no build of this kind")
    if build is None:
        limits = [v for t in tables for _k, v, _s in reads[t] if v is not None]
        if all(n_expert <= v for v in limits):
            return Judgement("known", f"every build read allows at least {min(limits)} experts")
        return Judgement(
            "undecided",
            f"no llama.cpp build was given, and builds read allow {min(limits)} to "
            f"{max(limits)} experts",
        )
    table, key = build.table, build.key
    rows = reads[table]
    first = next(((k, s) for k, v, s in rows if v is not None and n_expert <= v), (None, None))
    keys = [k for k, _v, _s in rows]
    read = f"{TABLE_WORDS[table]} {_label(table, keys[0])} to {_label(table, keys[-1])}"
    if key > keys[-1] and _admits(rows[-1][1], n_expert):
        return Judgement(
            "known", f"{_label(table, keys[-1])} already allows {rows[-1][1]}", first[0], rows[-1][2]
        )
    if key < keys[0] or key > keys[-1]:
        return Judgement(
            "undecided",
            f"{_label(table, key)} is outside the builds read for LLAMA_MAX_EXPERTS ({read})",
            first[0],
            first[1] or KNOWLEDGE,
        )
    i = max(j for j, k in enumerate(keys) if k <= key)
    at = [i] if keys[i] == key else [i, i + 1]
    states = {_admits(rows[j][1], n_expert) for j in at}
    said = " and ".join(
        f"{_label(table, keys[j])} ({rows[j][1] if rows[j][1] is not None else 'no limit'})"
        for j in at
    )
    if states == {True}:
        return Judgement("known", f"LLAMA_MAX_EXPERTS in {said} admits it", first[0], rows[at[0]][2])
    if states == {False}:
        return Judgement("too_many", f"LLAMA_MAX_EXPERTS in {said}", first[0], rows[at[-1]][2])
    return Judgement(
        "undecided",
        f"{_label(table, key)} lies between {said}, which disagree on it",
        first[0],
        rows[at[0]][2],
    )
