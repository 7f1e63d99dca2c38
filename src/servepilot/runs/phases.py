"""Follow an engine's log text and recognise its load phases, figures and fatal lines.

The rows live in engines/<engine>/logs.py as data. The tracker is fed raw chunks as they
arrive and is built for throughput: a chunk is scanned once per row for the row's literal
`needle` (str.find is C-speed), and regexes run only on the few lines that contain one. At
10,000 log lines a second that keeps the supervisor to a small fraction of a core (see
bench/bench_launch.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from servepilot.engines.ports import default_port as default_port  # launch's import point
from servepilot.units import UNIT_BYTES  # figures in these units are converted to bytes

PHASE_ORDER = ("starting", "init", "weights", "profiling", "kv_cache", "cuda_graphs", "server")
PHASE_LABELS = {
    "starting": "starting the process",
    "init": "initialising the engine",
    "weights": "loading weights",
    "profiling": "profiling memory / compiling",
    "kv_cache": "allocating the KV cache",
    "cuda_graphs": "capturing CUDA graphs",
    "server": "starting the HTTP server",
}

# Figures without a unit are numbers (commas allowed) or text.
_INT_FIELDS = {"kv_tokens", "max_model_len", "shard", "shards", "percent", "tp"}
_TEXT_FIELDS = {"engine_version", "kv_cache_dtype"}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")



@dataclass(frozen=True)
class Rule:
    needle: str
    regex: re.Pattern
    phase: str | None
    units: dict
    fatal: bool
    source: str


@dataclass(frozen=True)
class Event:
    """Something the display may show: a new phase, shard progress, a figure, a fatal line."""

    kind: str  # "phase" | "progress" | "figure" | "fatal"
    phase: str | None
    line: str
    values: dict = field(default_factory=dict)


def engine_rules(engine: str | None) -> tuple[Rule, ...]:
    """The rules for one engine, or for all engines when it is unknown (None)."""
    from servepilot.engines.registry import ENGINES, find_engine

    one = find_engine(engine)
    records = [one] if one is not None else list(ENGINES)
    rules: list[Rule] = []
    for record in records:
        mod = record.logs
        for row in mod.PHASES:
            rules.append(_rule(row, fatal=False))
        for row in mod.FATAL:
            rules.append(_rule(row, fatal=True))
    return tuple(rules)


def _rule(row: dict[str, Any], fatal: bool) -> Rule:
    return Rule(
        needle=row["needle"],
        regex=re.compile(row["regex"]),
        phase=row.get("phase"),
        units=dict(row.get("units", {})),
        fatal=fatal,
        source=row["source"],
    )


def _convert(name: str, raw: str, units: dict) -> Any:
    if name in units:
        return int(round(float(raw) * UNIT_BYTES[units[name]]))
    if name in _TEXT_FIELDS:
        return raw
    raw = raw.replace(",", "")
    return int(raw) if name in _INT_FIELDS else float(raw)


# The longest unterminated line kept between chunks. Real log lines are under a few KiB
# (vLLM's longest, the non-default args dump, is ~4 KiB); output without newlines beyond
# this is not a line any rule reads, and keeping it all made every feed copy it again.
MAX_TAIL_CHARS = 64 * 1024


class PhaseTracker:
    """Feed it chunks of log text; it keeps the phase, shard progress, figures and fatal line."""

    def __init__(self, engine: str | None):
        self.rules = engine_rules(engine)
        self.phase = "starting"
        self.progress: dict[str, int] = {}  # shard, shards, percent
        self.figures: dict[str, Any] = {}
        self.fatal_line: str | None = None
        self.server_hint = False  # a line said the HTTP server is starting: probe now
        self.lines_seen = 0
        self._tail = ""

    def feed(self, chunk: str) -> list[Event]:
        """Process newly read text (any split, possibly mid-line); return what changed."""
        text = self._tail + chunk
        # Keep an unterminated last line for the next chunk; tqdm ends records with \r.
        cut = max(text.rfind("\n"), text.rfind("\r"))
        if cut < 0:
            self._tail = text[-MAX_TAIL_CHARS:]
            return []
        self._tail, text = text[cut + 1 :][-MAX_TAIL_CHARS:], text[: cut + 1]
        self.lines_seen += text.count("\n")
        hits: list[tuple[int, int, Rule, re.Match, str]] = []
        for order, rule in enumerate(self.rules):
            start = text.find(rule.needle)
            while start >= 0:
                line_start = max(text.rfind("\n", 0, start), text.rfind("\r", 0, start)) + 1
                ends = [i for i in (text.find("\n", start), text.find("\r", start)) if i >= 0]
                line_end = min(ends) if ends else len(text)
                line = _ANSI.sub("", text[line_start:line_end])
                match = rule.regex.search(line)
                if match:
                    hits.append((line_start, order, rule, match, line))
                start = text.find(rule.needle, line_end)
        # Rows are scanned one after another; apply their hits in log order so phases
        # advance as the engine went through them.
        hits.sort(key=lambda h: (h[0], h[1]))
        events: list[Event] = []
        for _, _, rule, match, line in hits:
            events.extend(self._apply(rule, match, line))
        return events

    def _apply(self, rule: Rule, match: re.Match, line: str) -> list[Event]:
        out: list[Event] = []
        values = {}
        for k, v in match.groupdict().items():
            if v is None:
                continue
            try:
                values[k] = _convert(k, v, rule.units)
            except ValueError:  # "1.2.3" or "." matched a [\d.]+ group: not a figure
                continue
        if rule.fatal:
            if self.fatal_line is None:
                self.fatal_line = line.strip()
            return [Event("fatal", self.phase, line.strip())]
        if rule.phase and PHASE_ORDER.index(rule.phase) > PHASE_ORDER.index(self.phase):
            self.phase = rule.phase
            out.append(Event("phase", rule.phase, line.strip()))
        if rule.phase == "server":
            self.server_hint = True
        progress = {k: values.pop(k) for k in ("shard", "shards", "percent") if k in values}
        if progress and progress != self.progress:
            self.progress = progress
            out.append(Event("progress", rule.phase, line.strip(), {**progress}))
        if values:
            self.figures.update(values)
            out.append(Event("figure", rule.phase, line.strip(), {**values}))
        return out
