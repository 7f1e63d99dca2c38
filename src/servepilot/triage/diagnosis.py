"""Events to a Diagnosis: which error is the root cause, and what else the log says.

The rule, in order:
1. Only the last launch in the log counts (earlier launches make the diagnosis `stale`),
   and only lines not older than `since`.
2. Each event is matched to its best signature. Benign matches are notes, never causes.
3. Events with the same signature and the same message (digits ignored) are one error,
   counted over the processes that printed it: eight workers, one error, "x8".
4. The root cause is the earliest error of the best tier: a known cause (`cause` rows)
   beats a vague known error (`generic` rows: "NCCL error", "CUDA error"), which beats an
   unknown exception, which beats an echo ("Engine core initialization failed. See root
   cause above."). So a worker's exception explains the engine core's echo, and an earlier
   ImportError from a kernel library explains a later "architecture not supported".
   One exception: an exception raised *from* another ("The above exception was the direct
   cause of the following exception") takes its cause's place when its signature is the
   more specific one (higher priority), because the engine wrapped the error with what it
   knows about it (vLLM's "Failed to load the tokenizer ... consider setting
   trust_remote_code" around transformers' "Tokenizer class X does not exist").
5. After a healthy start ("Application startup complete"), only known causes count: a
   failed request later in a serving log is reported, not blamed.
6. No error and no healthy start: if the log's last lines are a phase known to hang (NCCL
   bootstrap, CUDA graph capture), that hang is the diagnosis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from servepilot.triage.events import Assembler, ErrorEvent
from servepilot.triage.keywords import guess_category
from servepilot.triage.lines import parse_line
from servepilot.triage.markers import stall_phase
from servepilot.triage.signatures import Match, Matcher, TriageRemedy

_TIER_RANK = {"cause": 0, "generic": 1, None: 2, "echo": 3}
_NORMALISE = re.compile(r"0x[0-9a-fA-F]+|\d+")
_OTHER_ERRORS_SHOWN = 20


@dataclass(frozen=True)
class Cause:
    """One error of the log (deduplicated), as reported in root_cause and other_errors."""

    category: str
    signature: str | None  # the signature id, None when no signature knows the message
    line: int  # 1-based line number of its first occurrence
    process: str | None  # process of the first occurrence, e.g. "Worker_TP4"
    excerpt: str  # the decisive lines as printed (ANSI stripped)
    explanation: str
    count: int  # occurrences (distinct processes when the log names them)
    processes: tuple[str, ...]
    exception: str | None  # "ValueError", "torch.OutOfMemoryError", ... or None
    message: str
    launch: int  # 0 for the first launch in the log
    phase: str | None = None  # start-up phase it interrupted: weights_loading, kv_cache_profiling, ...


@dataclass(frozen=True)
class Diagnosis:
    """What `triage` concluded about one log."""

    root_cause: Cause | None
    remedies: tuple[TriageRemedy, ...]
    other_errors: tuple[Cause, ...]
    stale: bool
    stale_reason: str | None
    healthy: bool  # a healthy start was seen in the last launch
    lines_read: int
    engine: str | None
    launches: int
    notes: tuple[Cause, ...] = ()  # benign known messages (fallback notices)


@dataclass
class _Group:
    first: ErrorEvent
    match: Match | None
    tier_rank: int
    keys: set
    occurrences: int = 1


_REASONS_SHOWN = 3  # a log of 1,000 launches names the first and the last, not 999 banners


def _reasons_str(reasons: list[str]) -> str:
    """Why the log holds several launches, in one short clause however many there are."""
    if len(reasons) <= 2 * _REASONS_SHOWN:
        return "; ".join(reasons)
    skipped = len(reasons) - 2 * _REASONS_SHOWN
    return "; ".join([*reasons[:_REASONS_SHOWN], f"... {skipped:,} more ...", *reasons[-_REASONS_SHOWN:]])


# An excerpt line cut from a 50 MB line must not fill the screen; vLLM's attention selector
# error, the longest real message seen, is ~1,000 characters. The whole answer stays under
# 64 KiB (issue 17): other_errors stop once their text passes _OTHER_ERRORS_CHARS.
_EXCERPT_LINE_CHARS = 1200
_EXCERPT_CHARS = 3000
_MESSAGE_CHARS = 1200
_OTHER_ERRORS_CHARS = 24_000


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def _expand(ev: ErrorEvent, matcher: Matcher) -> list[tuple[ErrorEvent, Match | None]]:
    """An event with its match; a run of error lines gives one event per known line in it."""
    if not ev.block:
        return [(ev, matcher.match(ev.message, ev.context))]
    context = "\n".join([text for _, text in ev.block] + ev.situation)
    out = []
    for line_no, text in ev.block:
        ll = parse_line(text)
        m = matcher.match(ll.message, context)
        if m is not None:
            sub = replace(ev, line_no=line_no, message=ll.message, text=ll.text, process=ll.process, pid=ll.pid)
            out.append((sub, m))
    return out or [(ev, None)]


def _excerpt(ev: ErrorEvent) -> str:
    if ev.block:
        lines = [text for _, text in ev.block[:6]]
    else:
        lines = [*[ln for ln in ev.lines if ln.strip()][-3:], ev.text]
    return _clip("\n".join(_clip(line, _EXCERPT_LINE_CHARS) for line in lines), _EXCERPT_CHARS)


def _cause(group: _Group) -> Cause:
    ev, m = group.first, group.match
    processes = tuple(sorted({p for p, _ in group.keys if p}))
    count = len(group.keys) if processes else group.occurrences
    if m is not None:
        category, signature, explanation = m.category, m.signature.id, m.explanation
        if m.tier == "echo" and category == "other":
            # a wrapper around a message no signature knows: its words may still say what failed
            guess = guess_category(ev.message)
            if guess is not None:
                category = guess[0]
                explanation += f" The wrapped message names {guess[1]!r}: a {category} failure (a guess from its words)."
    else:
        category, signature = "other", None
        what = ev.exc_type or "An error"
        where = f" in {ev.process}" if ev.process else ""
        explanation = f"{what}{where} that no servepilot signature knows; the excerpt is the engine's own words."
        guess = guess_category(ev.message)
        if guess is not None:
            category = guess[0]
            explanation += f" Its message names {guess[1]!r}, so it is filed under {category} (a guess from its words)."
    return Cause(
        category=category,
        signature=signature,
        line=ev.line_no,
        process=ev.process,
        excerpt=_excerpt(ev),
        explanation=explanation,
        count=max(count, 1),
        processes=processes,
        exception=ev.exc_type,
        message=_clip(ev.message, _MESSAGE_CHARS),
        launch=ev.launch,
        phase=ev.phase,
    )


def _bounded_causes(groups: list[_Group]) -> tuple[Cause, ...]:
    out, used = [], 0
    for g in groups:
        cause = _cause(g)
        used += len(cause.excerpt) + len(cause.message) + len(cause.explanation)
        if out and used > _OTHER_ERRORS_CHARS:
            break
        out.append(cause)
    return tuple(out)


def _stall_cause(tail: list[tuple[int, str]], launch: int) -> tuple[Cause, tuple[TriageRemedy, ...]] | None:
    """6. No error and no readiness: where the log stops may be a known hang (markers.py)."""
    parsed = [(n, parse_line(raw)) for n, raw in tail]
    row = stall_phase([ll.message for _, ll in parsed])
    if row is None:
        return None
    sig_id, category, pattern, explanation, _source, remedies = row
    line_no, ll = next((n, ll) for n, ll in reversed(parsed) if pattern.search(ll.message))
    excerpt = "\n".join(ll2.text for _, ll2 in parsed if ll2.text.strip())
    cause = Cause(
        category=category,
        signature=sig_id,
        line=line_no,
        process=ll.process,
        excerpt="\n".join(excerpt.splitlines()[-4:]),
        explanation=explanation,
        count=1,
        processes=(ll.process,) if ll.process else (),
        exception=None,
        message=ll.message,
        launch=launch,
    )
    return cause, tuple(TriageRemedy(kind=k, change=c, tradeoff=t) for k, c, t in remedies)


def decide(
    asm: Assembler,
    matcher: Matcher,
    lines_read: int,
    engine: str | None,
    tail: list[tuple[int, str]] | None = None,
) -> Diagnosis:
    """Apply the rule of this module to an Assembler that has seen the whole log.

    `tail`: the log's last lines (number, raw text), read for rule 6 when nothing failed.
    """
    last = asm.launch
    healthy_line = asm.healthy_launches.get(last)
    groups: dict[tuple, _Group] = {}
    notes: dict[tuple, _Group] = {}
    expanded = [pair for ev in asm.events for pair in _expand(ev, matcher)]
    for ev, m in expanded:
        if m is None and not ev.is_error:
            continue
        if m is None and ev.exc_type is None and not ev.message.strip():
            continue
        sig_id = m.signature.id if m else None
        key = (ev.launch, sig_id, ev.exc_type, _NORMALISE.sub("#", ev.message)[:300])
        table = notes if (m is not None and m.signature.benign) else groups
        g = table.get(key)
        if g is None:
            table[key] = _Group(ev, m, _TIER_RANK[m.tier] if m else _TIER_RANK[None], {(ev.process, ev.pid)})
        else:
            g.keys.add((ev.process, ev.pid))
            g.occurrences += 1

    def candidate(g: _Group) -> bool:
        if g.first.launch != last:
            return False
        if healthy_line is not None and g.first.line_no > healthy_line:
            return g.tier_rank == 0
        return True

    candidates = [g for g in groups.values() if candidate(g)]
    by_line = {g.first.line_no: g for g in candidates}

    def order(g: _Group) -> tuple[int, float]:
        wrapped = by_line.get(g.first.wraps) if g.first.wraps is not None else None
        if (
            wrapped is not None
            and g.match is not None
            and wrapped.match is not None
            and wrapped.tier_rank == g.tier_rank
            and g.match.signature.priority > wrapped.match.signature.priority
        ):
            return g.tier_rank, wrapped.first.line_no - 0.5
        return g.tier_rank, g.first.line_no

    root = min(candidates, key=order, default=None)
    others = sorted((g for g in groups.values() if g is not root), key=lambda g: (g.first.launch != last, g.first.line_no))
    stale_reasons = []
    if asm.launch > 0:
        stale_reasons.append(
            f"the log holds {asm.launch + 1} launches ({_reasons_str(asm.launch_reasons)}); "
            "only the last one is diagnosed"
        )
    if asm.old_lines:
        stale_reasons.append(
            f"{asm.old_lines} lines (first at line {asm.first_old_line}) are older than the run's start; they were ignored"
        )
    root_cause = _cause(root) if root else None
    remedies = root.match.remedies if root and root.match else ()
    if root is None and healthy_line is None and tail:
        stalled = _stall_cause(tail, last)
        if stalled is not None:
            root_cause, remedies = stalled
    return Diagnosis(
        root_cause=root_cause,
        remedies=remedies,
        other_errors=_bounded_causes(others[:_OTHER_ERRORS_SHOWN]),
        stale=bool(stale_reasons),
        stale_reason="; ".join(stale_reasons) or None,
        healthy=healthy_line is not None,
        lines_read=lines_read,
        engine=engine,
        launches=asm.launch + 1,
        notes=tuple(_cause(g) for g in notes.values() if g.first.launch == last),
    )
