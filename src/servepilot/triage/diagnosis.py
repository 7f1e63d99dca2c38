"""Events to a Diagnosis: which error is the root cause, and what else the log says.

The rule, in order:
1. Only the last launch in the log counts (earlier launches make the diagnosis `stale`),
   and only lines not older than `since`.
2. Each event is matched to its best signature. Benign matches are notes, never causes.
3. Events with the same signature and the same message (digits ignored) are one error,
   counted over the processes that printed it: eight workers, one error, "x8".
4. The root cause is the first error of the best rank: a known cause (`cause` rows) beats a
   vague known error (`generic` rows: "NCCL error", "CUDA error", a worker that died), which
   beats an unknown exception, which beats a known cause printed only as a *warning*, which
   beats an echo ("Engine core initialization failed. See root cause above."). A warning
   never outranks a fatal error, with one exception: a known cause printed as a warning
   explains a vague error of the same launch (NCCL's "NCCL WARN ... /dev/shm" around
   "NCCL error: unhandled system error"). "First" is first in time when every candidate carries a
   timestamp (processes of one launch flush their lines out of order), else first in the
   file. So a worker's exception explains the engine core's echo, and an earlier
   ImportError from a kernel library explains a later "architecture not supported".
   One exception: an exception raised *from* another ("The above exception was the direct
   cause of the following exception") takes its cause's place when its signature is the
   more specific one (higher priority), because the engine wrapped the error with what it
   knows about it (vLLM's "Failed to load the tokenizer ... consider setting
   trust_remote_code" around transformers' "Tokenizer class X does not exist").
   Among unknown errors, an exception (or a line logged at ERROR) outranks a plain line that
   only says something failed (a process prints those and goes on), and a line that points at
   another failure (a client's request cut off with EOF, "see the server logs") ranks as an
   echo. Causal order across processes: a rank that timed out waiting for a collective
   (`waits_on_peers` signatures: NCCL's watchdog) yields to another process's fatal error;
   a report of a death (`consequence` signatures: a worker or Ray actor that died, a kernel
   fault seen at the next synchronisation) yields to an unknown error printed before it,
   which is what the process died of. An exception asyncio reported only when its unawaited
   task was collected was printed at teardown: it ranks after the echoes. A report whose own
   words name nothing rests on the line that does: Triton's "CompilationError: at L:C:" on
   its inner error, a failed build's exception on the compiler's first error in its output,
   a stop from outside while blocked on the network on the call that waited (waits.py).
   An error its own process went on from (a later
   start-up phase of the same process follows it) was survived: it ranks with the vague
   warnings (the NGC container's "ERROR: This container was built for ..." notice). When
   the root cause is then only an echo that names nothing placeable, a known cause the launch
   went on from before it gives the echo its category (llama.cpp's fit step: "failed to fit
   params to free device memory", then the load dies of the device).
5. After a healthy start ("Application startup complete"), only known causes printed after
   it count: errors before it were survived (a missing generation_config.json notice), and
   a failed request later in a serving log is reported, not blamed; an exception that
   unwound an engine subprocess's entry point (SGLang's scheduler, vLLM's engine core or a
   worker) killed that process and counts too, and so does every error printed between
   readiness and a reported death (vLLM's EngineDeadError): the server did not survive it.
   An interruption that unwinds the processes then (Ctrl-C, a notebook cell stopped) is the
   operator stopping a server that worked: not a failure.
6. No error (or only warnings) and no healthy start: if the log's last lines are a phase
   known to hang (NCCL bootstrap, CUDA graph capture), that hang is the diagnosis; the
   warnings become alternatives.
7. The answer says how sure it is (`confidence`, 0-1, and the `basis` it rests on) and
   lists competing readings (`alternatives`): another known cause of a different category
   in the same launch, the vague error a warning was taken to explain, the other phases a
   bare CUDA OOM could belong to. An error no signature knows keeps its own words and
   exception; its category is read from its frames or words when they name a part of the
   launch (a guess, low confidence), else it is `other`. Quoted model ids and paths lend no
   words; a bare AssertionError is read by its assert statement; an unknown memory failure
   is placed by its phase like CUDA's own OOM, and a dtype an operator has no kernel for,
   refused while the KV cache is allocated, is the KV cache dtype when the launch asked for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from servepilot.triage.engine_source import match_engine_message
from servepilot.triage.events import STOPS, Assembler, ErrorEvent, PhaseMark
from servepilot.triage.keywords import (
    guess_category,
    guess_from_frames,
    guess_from_source,
    missing_submodule_of,
    raised_importing,
    status_category,
    words_of_mismatch,
)
from servepilot.triage.lines import parse_line
from servepilot.triage.markers import STALL_POINTS_AT_START, is_healthy, phase_of, stall_phase
from servepilot.triage.signatures import PHASES, Match, Matcher, TriageRemedy
from servepilot.triage.waits import where_it_waited

_TIER_RANK = {"cause": 0, "generic": 1, None: 2, "echo": 3}
_WARNING_CAUSE_RANK = 2.5  # a known cause printed as a warning: after unknown exceptions
_WARNING_OTHER_RANK = 3.5  # a vague or unknown warning: after the echoes
# An exception asyncio reported only when its unawaited task was collected ("Task exception was
# never retrieved", events._ORPHAN_REPORT): it is printed when the process tears down, not when
# the task failed, so even an echo of the launch's failure is surer than it is about the cause.
_ORPHANED_RANK = 3.2
# An unknown memory failure, by the start-up phase it came in (markers.PHASES).
_OOM_BY_PHASE = {"kv_cache_profiling": "oom_kv_cache", "cuda_graph_capture": "cuda_graph"}
# An interruption from outside (Ctrl-C, a supervisor's or a timeout's SIGTERM): Python raises
# KeyboardInterrupt or SystemExit and asyncio cancels what was running; vLLM's engine turns
# SIGTERM into KeyboardInterrupt (vllm/engine/multiprocessing/engine.py@v0.8.5 signal_handler).
# The process was stopped, it did not fail: what it was waiting on, where the log says, is the
# cause, and the stop ranks as an echo. So does an error line with no words at all (the "15"
# `logger.exception(e)` prints for such an exception): it names nothing.
_INTERRUPTIONS = STOPS
_NO_WORDS = re.compile(r"[^A-Za-z]*")
_PLAIN_UNKNOWN_RANK = 2.2  # an unknown plain line (no exception, no ERROR level): after exceptions
_RETOLD_RANK = 2.3  # a death report retelling an unknown error: after the error's own lines
# An unknown line that reports another process's failure from outside: a client's request cut
# off (Go's `Post "http://127.0.0.1:11434/api/chat": EOF`, a reset or refused connection) or a
# pointer to another log ("please see the ollama server logs for details").
_POINTS_ELSEWHERE = re.compile(
    r'(?:"https?://[^"]*"|https?://\S+):? (?:EOF|read: connection reset|dial tcp)|\bconnection refused\b'
    r"|\bsee (?:the )?(?:\w+ )?(?:server )?logs?\b"
    # vLLM's executor when a worker dies: "... got fatal signal from worker processes, shutting
    # down. See stack trace above for root cause issue." (vllm/v1/executor/multiproc_executor.py)
    r"|\bsee (?:the )?stack trace above\b",
    re.IGNORECASE,
)
# Confidence of a root cause by what its category rests on (rule 7 of this module).
CONFIDENCE = {
    "signature": 0.9,  # a known engine message, category from its text, frames or phase
    "signature-bare": 0.6,  # a known message whose meaning depends on a phase the log does not show
    "warning-explains": 0.7,  # a known cause printed as a warning, before a vague fatal error
    "warning": 0.55,  # a known cause printed only as a warning
    "generic": 0.5,  # a true but vague known error ("NCCL error", a worker that died)
    "engine-source": 0.6,  # no signature, but the engine's own message template (engine_source.py)
    # no signature, but a device runtime's own status code (runtime_status.py): sure of what
    # happened to the device, not of why
    "runtime-status": 0.6,
    "frames": 0.45,  # an unknown exception, category from where it was raised
    "words": 0.35,  # an unknown error, category from its words
    "none": 0.3,  # an unknown error, `other`
    "echo": 0.2,  # only a wrapper that points at an error the log does not show
    "stall": 0.5,  # no error: where the log stopped
    "sole-line": 0.2,  # no error marker at all, but the text is one line: a pasted error sentence
    "phase-unknown": 0.25,  # an alternative: the phase a bare message could have come from
    "rival": 0.4,  # an alternative: a second reading the same message gives (Match.rivals)
}
_COMPETED = 0.7  # the most a cause gets when another known cause of a different category competes
_ALTERNATIVES_SHOWN = 3
_NORMALISE = re.compile(r"0x[0-9a-fA-F]+|\d+")
_OTHER_ERRORS_SHOWN = 20
# The entry function of an engine's subprocess: an exception that unwound it killed that
# process, wherever it sits in the log (SGLang's scheduler: sglang/srt/managers/scheduler.py
# run_scheduler_process@v0.5.2; vLLM's engine core and workers: vllm/v1/engine/core.py
# run_engine_core and vllm/v1/executor/multiproc_executor.py worker_main@v0.18.0, checked in
# those packages; the frames as printed in corpus/full-logs, from v0.10 on).
_ENGINE_PROCESS_FRAME = re.compile(r", in (?:run_scheduler_process|run_engine_core|worker_main)$")
_LAST_WORDS = 3  # an exception this close to the log's end is what the process died of
# a frame of a process's own entry point: the exception unwound the whole process (a failed
# request unwinds only to the web server's handler)
_TOP_LEVEL_FRAME = re.compile(
    r"_run_module_as_main|, in <module>$|multiprocessing/process\.py\", line \d+, in _bootstrap"
)


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
    confidence: float = 0.0  # how sure the category is, 0-1 (CONFIDENCE)
    basis: str = "none"  # what the category rests on: a CONFIDENCE key


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
    alternatives: tuple[Cause, ...] = ()  # competing readings of the failure, best first


@dataclass
class _Group:
    first: ErrorEvent
    match: Match | None
    tier_rank: int
    keys: set
    occurrences: int = 1
    survived: bool = False  # its process went on to a later start-up phase (_survived)
    # asyncio reported one of its events only when the task was collected (events._ORPHAN_REPORT):
    # the same exception seen elsewhere without the report (its report line cut off) is that too
    orphaned: bool = False


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
        m = matcher.match(ev.message, ev.context, ev.phase)
        if m is None and _BARE_ASSERT.search(ev.message):
            # a bare AssertionError says nothing; the assert it failed may be a wrapper's check
            # that an earlier step worked (llama-cpp-python's "assert self.model is not None"
            # after llama.cpp's own load error): an echo of that step's error
            words = _words_of(ev)
            if words != ev.message:
                m = matcher.match(words, ev.context, ev.phase)
        return [(ev, m)]
    context = "\n".join([text for _, text in ev.block] + ev.situation)
    out = []
    for line_no, text in ev.block:
        ll = parse_line(text)
        m = matcher.match(ll.message, context, ev.phase)
        if m is not None:
            out.append((_moved_to(ev, line_no, ll), m))
    if out and all(m.tier == "echo" or m.signature.consequence for _, m in out):
        # only wrappers were recognised ("failed to load model"), or reports of a death: the
        # run's first line, which they wrap or report, is the error itself
        # ("gguf_init_from_file: failed to open GGUF file"; vLLM's "Failed: Cuda error ..."
        # before "Worker proc VllmWorker-0 died unexpectedly")
        first_no, first_text = ev.block[0]
        if first_no < out[0][0].line_no:
            ll = parse_line(first_text)
            out.insert(0, (_moved_to(ev, first_no, ll, alone=True), None))
        elif out[0][1].signature.consequence and _carries_unknown_error(out[0][1]):
            # a death report pasted before the dead process's own lines (a client's "Error:
            # 500 ... llama runner process has terminated: ..." above the runner's log): the
            # first unrecognised line after it is the process's own error, printed earlier
            for line_no, text in ev.block:
                ll = parse_line(text)
                if line_no <= out[0][0].line_no:
                    continue
                if matcher.match(ll.message, context, ev.phase) is None:
                    out.append((_moved_to(ev, line_no, ll, alone=True), None))
                    break
    if not out and guess_category(ev.message) is None:
        # a run of unknown lines whose first line names nothing (GGML_ABORT's "ggml-cann.cpp:67:
        # CANN error") rests on the first line of the run that says what failed ("CANN error:
        # ... support for Ascend910 is not implemented"): the run is one error
        for line_no, text in ev.block[1:6]:
            ll = parse_line(text)
            if guess_category(ll.message) is not None and not _POINTS_ELSEWHERE.search(ll.message):
                return [(_moved_to(ev, line_no, ll), None)]
    if not out and _POINTS_ELSEWHERE.search(ev.message):
        # a run of unknown lines that opens with a pointer ("see the server logs", a client's
        # EOF): the first line that is not one is the error the run reports
        for line_no, text in ev.block[1:]:
            ll = parse_line(text)
            if ll.message.strip() and not _POINTS_ELSEWHERE.search(ll.message):
                return [(_moved_to(ev, line_no, ll), None)]
    return out or [(ev, None)]


def _moved_to(ev: ErrorEvent, line_no: int, ll, *, alone: bool = False) -> ErrorEvent:
    """The run's event as one of its lines: that line's words, place and time (the run's where
    the line has none). `alone`: the line stands apart from the run (no block, no frames)."""
    moved = replace(
        ev, line_no=line_no, message=ll.message, text=ll.text,
        process=ll.process or ev.process, pid=ll.pid if ll.pid is not None else ev.pid,
        level=ll.level or ev.level, timestamp=ll.timestamp or ev.timestamp,
    )
    return replace(moved, block=[], lines=[]) if alone else moved


def _excerpt(ev: ErrorEvent) -> str:
    if ev.block:
        lines = [text for _, text in ev.block[:6]]
    else:
        lines = [*[ln for ln in ev.lines if ln.strip()][-3:], ev.text]
    return _clip("\n".join(_clip(line, _EXCERPT_LINE_CHARS) for line in lines), _EXCERPT_CHARS)


def _basis(group: _Group) -> str:
    """What the group's category rests on (a CONFIDENCE key)."""
    m = group.match
    if m is None:
        return "none"
    if m.tier == "echo":
        return "echo"
    if m.tier == "generic":
        return "generic"
    if group.first.is_warning:
        return "warning"
    if m.evidence in ("message", "accounting") and m.signature.by_phase:
        # a CUDA OOM with neither telling frames nor a known phase; or one placed only by its
        # own memory accounting (signatures._graphs_captured), which a log line would outrank
        return "signature-bare"
    return "signature"


def _cause(group: _Group, basis: str | None = None, engine: str | None = None) -> Cause:
    ev, m = group.first, group.match
    processes = tuple(sorted({p for p, _ in group.keys if p}))
    count = len(group.keys) if processes else group.occurrences
    basis = basis or _basis(group)
    if m is not None:
        category, signature, explanation = m.category, m.signature.id, m.explanation
        if m.tier == "generic" and category == "other" and m.evidence == "message":
            # a vague known error (a bare KeyError, a process that died) that a device runtime's
            # status in its words, or else its frames, place
            by_status = status_category(ev.message)
            by_frames = guess_from_frames(ev.lines)
            if by_status is not None:
                category, basis = by_status[0], "runtime-status"
                explanation += f" {_status_words(ev.message, category)}"
            elif by_frames is not None:
                category, basis = by_frames[0], "frames"
                explanation += (
                    f" It was raised in {by_frames[1]!r}, a {category} part of the engine (a guess from where)."
                )
        if category == "cuda_driver_arch" and m.evidence == "message":
            # a kernel without a build for this GPU whose own source location the message names
            # ("CUDA error (.../flash-attention-src/hopper/flash_fwd_launch_template.h:166): no
            # kernel image ..."): the attention backend chose a kernel this GPU has no build
            # of, and choosing another backend is the way past it
            where = guess_from_source(ev.message)
            if where is not None and where[0] == "attention_backend":
                category = "attention_backend"
                explanation += (
                    f" The kernel that has none is an attention kernel ({where[1]!r}): the"
                    " attention backend's choice of kernel is what this GPU cannot run."
                )
        if m.tier == "echo" and category == "other":
            # a wrapper around a message no signature knows: its words may still say what failed
            guess = guess_category(ev.message)
            by_status = status_category(ev.message)
            if by_status is not None:
                category, basis = by_status[0], "runtime-status"
                explanation += f" {_status_words(ev.message, category)}"
            elif guess is not None and missing_submodule_of(ev.message, guess[0]) is None:
                category, basis = guess[0], "words"
                explanation += (
                    f" The wrapped message names {guess[1]!r}: a {category} failure (a guess from its words)."
                )
    else:
        category, signature = "other", None
        what = ev.exc_type or "An error"
        where = f" in {ev.process}" if ev.process else ""
        explanation = f"{what}{where} that no servepilot signature knows; the excerpt is the engine's own words."
        # an install whose packages do not fit each other fails wherever the import happens
        by_frames = None if raised_importing(ev.lines, ev.message) else guess_from_frames(ev.lines)
        by_frames = by_frames or guess_from_source(ev.message)
        by_words = guess_category(_words_of(ev))
        drifted = by_words and missing_submodule_of(ev.message, by_words[0])
        if drifted:
            by_words = None
            explanation += (
                f" The package {drifted!r} is installed but lacks that module: a version of it"
                " that does not fit the rest of the install."
            )
        by_status = status_category(ev.message)
        # the engine's templates are searched only when no runtime status decided
        by_source = match_engine_message(ev.message, engine) if by_status is None else None
        if by_status is not None:
            # the device runtime's own status code: what happened to the device, in the
            # runtime's words, whatever part of the engine was running when it was returned
            category, basis = by_status[0], "runtime-status"
            explanation += f" {_status_words(ev.message, category)}"
        elif by_source is not None:
            # the engine's own refusal, read from its source: surer than where or how it is worded
            category, basis = by_source.category, "engine-source"
            explanation += (
                f" The engine raises this message itself: {by_source.engine} "
                f"{by_source.source} (in releases {by_source.versions}), a module whose "
                f"refusals are {category}, so it is filed under {category}."
            )
        elif by_frames is not None:
            category, basis = by_frames[0], "frames"
            explanation += (
                f" It was raised in {by_frames[1]!r}, a {category} part of the engine, so it is filed under "
                f"{category} (a guess from where it was raised)."
            )
        elif by_words is not None:
            category, basis = by_words[0], "words"
            explanation += (
                f" Its message names {by_words[1]!r}, so it is filed under {category} (a guess from its words)."
            )
        from_text = basis in ("words", "engine-source", "runtime-status")
        refused = _refused_dtype(ev.message)
        in_kv_allocation = ev.phase == "kv_cache_profiling"
        if category == "other" and in_kv_allocation and _same_dtype(refused, ev.kv_dtype):
            # a kernel with no implementation for the KV cache's own dtype while the KV cache is
            # allocated: the dtype the launch asked for the KV cache is what has no kernel here
            category, basis = "kv_cache_dtype", "words"
            explanation += (
                f" It came while the KV cache was being allocated, and the dtype it refuses "
                f"({refused}) is the KV cache dtype the launch asked for ({ev.kv_dtype})."
            )
        if category == "oom_weights" and from_text and ev.phase in _OOM_BY_PHASE:
            # what a memory failure means depends on where the start-up was, for messages
            # no signature knows as much as for CUDA's own OOM (signatures' by_phase)
            category = _OOM_BY_PHASE[ev.phase]
            explanation += f" It came while the start-up was in {ev.phase}, so it is {category}."
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
        confidence=CONFIDENCE[basis],
        basis=basis,
    )


def _status_words(message: str, category: str) -> str:
    """The sentence that says which runtime status an error carries and where it is defined."""
    from servepilot.triage.runtime_status import read_status

    status = read_status(message)
    if status is None:  # status_category found one: the same table answers the same message
        return ""
    what = status.meaning.replace("_", " ")
    if status.meaning == "device_stack_mismatch":  # a device bridge (runtime_errors.yaml `bridges`)
        return (
            f"It names the {status.runtime} ({status.name}, imported as in {status.source}): "
            f"{status.said!r} is a {what}, filed under {category}."
        )
    if status.code is None:  # a runtime front's own words (runtime_errors.yaml `messages`)
        return (
            f"It is {status.runtime}'s own account ({status.source}): {status.said!r} is "
            f"{what}, filed under {category}."
        )
    return (
        f"It carries {status.runtime} status {status.name} ({status.code}, printed as "
        f"{status.said!r}; {status.source}), which means {what}: filed under {category}."
    )


# PyTorch's refusal of a dtype an operator has no kernel for (ATen's dispatch macros:
# `"fill_cuda" not implemented for 'Float4_e2m1fn_x2'`, aten/src/ATen/Dispatch.h).
_NOT_IMPLEMENTED_FOR = re.compile(r"\bnot implemented for '(?P<dtype>\w+)'")
# A low-precision float dtype as the engines and torch name it: fp8, fp8_e4m3, fp4_e2m1,
# torch.float8_e4m3fn, Float4_e2m1fn_x2: the width and, when named, the exponent/mantissa split.
_FLOAT_DTYPE = re.compile(r"(?:fp|float)(?P<bits>4|8)(?:_(?P<format>e\dm\d))?", re.IGNORECASE)


def _refused_dtype(message: str) -> str | None:
    m = _NOT_IMPLEMENTED_FOR.search(message)
    return m.group("dtype") if m else None


def _same_dtype(refused: str | None, kv_dtype: str | None) -> bool:
    """Whether a refused torch dtype is the KV cache dtype a launch asked for (fp4_e2m1 is
    Float4_e2m1fn_x2; a bare fp8 is any FP8 split)."""
    if not refused or not kv_dtype:
        return False
    a, b = _FLOAT_DTYPE.search(refused), _FLOAT_DTYPE.search(kv_dtype)
    if a is None or b is None or a.group("bits") != b.group("bits"):
        return False
    fa, fb = a.group("format"), b.group("format")
    return fa is None or fb is None or fa.lower() == fb.lower()


_BARE_ASSERT = re.compile(r"(?:^|\.)AssertionError:?\s*$")
_ASSERT_LINE = re.compile(r"^\s*assert\b")


def _words_of(ev: ErrorEvent) -> str:
    """The text an unknown error's category is guessed from: its message, or for a bare
    AssertionError the assert statement it failed (the traceback's last code line)."""
    if _BARE_ASSERT.search(ev.message):
        for line in reversed(ev.lines):
            message = parse_line(line).message
            if _ASSERT_LINE.match(message):
                return f"{ev.message} {message.strip()}"
    return words_of_mismatch(ev.message)


def _rank(g: _Group) -> float:
    """Rule 4's order: known cause, vague known error, unknown exception, warning, echo."""
    if g.survived:
        return _WARNING_OTHER_RANK
    if g.orphaned and g.match is None:
        return _ORPHANED_RANK
    if g.first.is_warning:
        return _WARNING_CAUSE_RANK if g.tier_rank == 0 else _WARNING_OTHER_RANK
    if g.match is None and (_is_interruption(g.first) or g.first.told_by is not None):
        # a stop from outside, or an exception whose own words name only a place and whose
        # inner error (printed after it) says what failed there
        return _TIER_RANK["echo"]
    if _carries_unknown_error(g.match):
        # a wrapper that quotes an error no signature knows ("Worker failed with error 'kv_cache
        # must be a tuple'", "failed to load model '...': load_hparams: unknown projector
        # type: gemma4uv") is that error's report, the only one when the log shows no other
        if g.match.signature.consequence:
            # a death report that retells the dead process's last error line (ollama's "llama
            # runner process has terminated: <the runner's last error line>"): the process's
            # own lines, where the log shows them, were printed before it, whatever order a
            # reporter pasted them in
            return _RETOLD_RANK
        plain = g.first.exc_type is None and _is_plain_line(g.first)
        return _PLAIN_UNKNOWN_RANK if plain else _TIER_RANK[None]
    if g.match is None and g.first.exc_type is None and _POINTS_ELSEWHERE.search(g.first.message):
        # a line that points elsewhere (a client whose request died with the server, "see the
        # server logs", "see stack trace above"), at whatever level it was logged, is an echo:
        # the error it points at, when the log has it, is the cause
        return _TIER_RANK["echo"]
    if g.match is None and _is_plain_line(g.first):
        return _PLAIN_UNKNOWN_RANK
    return g.tier_rank


def _at_the_wait(stop: Cause, ev: ErrorEvent) -> Cause:
    """A stop from outside whose traceback shows the process blocked on the network rests on
    the call that waited (waits.py): that is what the launch hung on."""
    wait = where_it_waited(ev.stack)
    if wait is None:
        return stop
    shown = (wait.frame, wait.code and f"    {wait.code}", ev.text)
    excerpt = "\n".join(line for line in shown if line)
    return replace(
        stop, line=wait.line, excerpt=excerpt,
        explanation=f"{stop.explanation} The process was stopped from outside ({ev.message}) while "
        f"it waited in {wait.function} (line {wait.line}): the call it hung on, not the stop, is "
        "what to look at.",
    )


def _at_the_compiler_error(report: Cause, ev: ErrorEvent) -> Cause:
    """An exception that carries a failed build's output rests on the compiler's first error in
    it (events._BUILD_OUTPUT): the exception says only that the build failed."""
    line_no, text = ev.diagnostic
    return replace(
        report, line=line_no, excerpt=_clip(f"{ev.text}\n...\n{text}", _EXCERPT_CHARS),
        explanation=f"{report.explanation} The build it ran failed at line {line_no}, the "
        "compiler's first error in its output.",
    )


def _is_interruption(ev: ErrorEvent) -> bool:
    """A stop from outside, or a line that names nothing (see _INTERRUPTIONS)."""
    if ev.exc_type is not None:
        return ev.exc_type.rsplit(".", 1)[-1] in _INTERRUPTIONS
    return _NO_WORDS.fullmatch(ev.message) is not None


def _carries_unknown_error(m: Match | None) -> bool:
    """An echo whose wrapped message (its `unwrap` group) no signature knows: the matcher hands
    back the inner message's own match whenever a signature knows it."""
    if m is None or m.tier != "echo" or not m.signature.unwrap:
        return False
    return bool((m.groups.get(m.signature.unwrap) or "").strip())


def _is_plain_line(ev: ErrorEvent) -> bool:
    """An unknown line that only *says* something failed: no exception, no ERROR level.

    A process prints such a line and goes on ("Failed to get device capability ...", a
    compiler's complaint while probing flags); an exception, or a line logged at ERROR,
    is what a process dies of. So among unknown errors the exception is the root cause.
    """
    return ev.exc_type is None and ev.level not in ("ERROR", "CRITICAL", "FATAL", "E")


_PHASE_ORDER = {phase: i for i, phase in enumerate(PHASES)}


def _survived(g: _Group, marks: list[PhaseMark]) -> bool:
    """Whether every process that printed an error went on to a later start-up phase after it.

    An error a process survives is no cause of its death: the NGC container's entrypoint
    prints "ERROR: This container was built for NVIDIA Driver Release ..." and the engine then
    loads its weights and sizes its KV cache (corpus/full-logs jethac sglang logs); llama.cpp's
    fit step warns it cannot fit the model and loading goes on. A phase line of the same
    process (or of a log with no process names) after the error shows it went on; another
    process's progress does not (one worker fails while the others load), and one error that
    eight workers printed was survived only if all eight went on.
    """
    if g.match is not None and g.match.signature.latent:
        return False  # going on is what a latent fault does: it bites later
    ev = g.first
    rank = _PHASE_ORDER.get(ev.phase, -1) if ev.phase else -1
    # a line logged as a warning says by its level that the process goes on; a progress bar
    # after it, stamped or not, only confirms it (vLLM on ROCm warns "Failed to import from
    # vllm._C" and loads its weights: vllm/platforms/rocm.py@v0.19.0)
    stamp = None if ev.is_warning and ev.exc_type is None else _time_key(ev.timestamp)
    # later in the file, and for a stamped error stamped later too: processes flush their lines
    # out of order, and an unstamped progress bar cannot be placed in time against it
    later = [
        m for m in marks
        if m.line_no > ev.line_no and _PHASE_ORDER[m.phase] > rank
        and (not stamp or (_time_key(m.timestamp) or "") >= stamp)
    ]
    if not later:
        return False
    processes = {p for p, _ in g.keys} or {None}
    return all(
        any(m.process is None or p is None or m.process == p for m in later) for p in processes
    )


_TS_YEAR = re.compile(r"^\d{4}-")


def _time_key(ts: str | None) -> str | None:
    """A sortable "MM-DD HH:MM:SS.ffffff" from the engines' timestamp shapes, or None."""
    if not ts:
        return None
    ts = _TS_YEAR.sub("", ts.replace("T", " ")).replace(",", ".")
    if len(ts) < 14 or ts[2] != "-" or ts[5] != " ":
        return None
    main, _, frac = ts[:14], ts[14:15], ts[15:21]
    return f"{main}.{frac.ljust(6, '0') if frac.isdigit() else '000000'}"


def _first(groups: list[_Group], line_of) -> _Group:
    """The first of equally ranked groups: in time when all carry a timestamp, else in the file."""
    keys = [_time_key(g.first.timestamp) for g in groups]
    if all(keys):
        return min(zip(keys, groups, strict=True), key=lambda kg: (kg[0], line_of(kg[1])))[1]
    return min(groups, key=line_of)


def _bounded_causes(groups: list[_Group]) -> tuple[Cause, ...]:
    out, used = [], 0
    for g in groups:
        cause = _cause(g)
        used += len(cause.excerpt) + len(cause.message) + len(cause.explanation)
        if out and used > _OTHER_ERRORS_CHARS:
            break
        out.append(cause)
    return tuple(out)


def _stall_line(parsed: list, pattern, at_start: bool):
    """(line number, parsed line) the stall rests on: the phase's last line, or with `at_start`
    the first line of its final run (walking back over its own progress lines and lines of no
    phase, stopping at a line that announces another phase)."""
    last = max(i for i, (_, ll) in enumerate(parsed) if pattern.search(ll.message))
    chosen = last
    if at_start:
        for i in range(last - 1, -1, -1):
            message = parsed[i][1].message
            if pattern.search(message):
                chosen = i
            elif phase_of(message) is not None:
                break
    return parsed[chosen]


def _stall_cause(tail: list[tuple[int, str]], launch: int) -> tuple[Cause, tuple[TriageRemedy, ...]] | None:
    """6. No error and no readiness: where the log stops may be a known hang (markers.py)."""
    parsed = [(n, parse_line(raw)) for n, raw in tail]
    row = stall_phase([ll.message for _, ll in parsed])
    if row is None:
        return None
    sig_id, category, pattern, explanation, _source, remedies = row
    line_no, ll = _stall_line(parsed, pattern, at_start=sig_id in STALL_POINTS_AT_START)
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
        confidence=CONFIDENCE["stall"],
        basis="stall",
    )
    return cause, tuple(TriageRemedy(kind=k, change=c, tradeoff=t) for k, c, t in remedies)


def _sole_line_cause(tail: list[tuple[int, str]], launch: int) -> Cause | None:
    """A text in which nothing failed by any marker, and whose only line that is not progress
    or status is one sentence, is still what the user pasted as the error ("SGlang only
    supports sm 75 and above"): it is named verbatim, as a guess."""
    lines = [(n, parse_line(raw)) for n, raw in tail if raw.strip()]
    # progress and status lines pasted around it say nothing failed ("INFO ... Automatically
    # detected platform cuda." above SGLang's "enable_memory_saver is enabled, but
    # torch-memory-saver is not installed"): the one other line is the sentence handed over
    said = [(n, ll) for n, ll in lines if ll.message and not _is_status(ll)]
    if len(said) != 1:
        return None
    line_no, ll = said[0]
    guessed = guess_category(ll.message)
    explanation = (
        "the text's one sentence that is not progress or status has no error marker; it is taken "
        "as the error as given"
    )
    by_source = match_engine_message(ll.message)
    if by_source is not None:  # the sentence is one an engine prints: its module says what it means
        guessed = (by_source.category, by_source.template)
        explanation += (
            f"; {by_source.engine} prints it in {by_source.source} (releases {by_source.versions})"
        )
    return Cause(
        category=guessed[0] if guessed else "other",
        signature=None,
        line=line_no,
        process=ll.process,
        excerpt=ll.text,
        explanation=explanation,
        count=1,
        processes=(ll.process,) if ll.process else (),
        exception=None,
        message=ll.message,
        launch=launch,
        confidence=CONFIDENCE["sole-line"],
        basis="sole-line",
    )


def _is_status(ll) -> bool:
    """A progress or status line: logged at DEBUG/INFO, a readiness line or a start-up phase."""
    if ll.level in ("DEBUG", "INFO"):
        return True
    return is_healthy(ll.message) or phase_of(ll.message) is not None


def decide(
    asm: Assembler,
    matcher: Matcher,
    lines_read: int,
    engine: str | None,
    tail: list[tuple[int, str]] | None = None,
    guess_sole_line: bool = False,
) -> Diagnosis:
    """Apply the rule of this module to an Assembler that has seen the whole log.

    `tail`: the log's last lines (number, raw text), read for rule 6 when nothing failed.
    `guess_sole_line`: the text is what a user handed over as the error (an excerpt, a saved
    message), so a single line with no error marker is still taken as the error, as a guess;
    the log of a run servepilot supervised is whole, and a lone quiet line there is no failure.
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
            tier_rank = _TIER_RANK[m.tier] if m else _TIER_RANK[None]
            g = table[key] = _Group(ev, m, tier_rank, {(ev.process, ev.pid)})
        else:
            g.keys.add((ev.process, ev.pid))
            g.occurrences += 1
        g.orphaned = g.orphaned or ev.orphaned

    # the first report of a death after readiness (vLLM's EngineDeadError, a worker that died):
    # the server did not survive what came between readiness and it
    deaths = [
        g.first.line_no for g in groups.values()
        if healthy_line is not None and g.first.launch == last and g.first.line_no > healthy_line
        and g.match is not None and g.match.signature.consequence
    ]
    died_at = min(deaths) if deaths else None

    def candidate(g: _Group) -> bool:
        if g.first.launch != last:
            return False
        if healthy_line is not None:
            # the launch got through start-up, so whatever it printed before was survived;
            # only a known cause after readiness (a request that breaks it) counts, or any
            # exception that killed its process (vLLM's API server failing in init_app_state
            # after the engine core said it was ready), or a death and what came before it
            before_death = died_at is not None and g.first.line_no <= died_at
            if g.first.exc_type is not None and _is_interruption(g.first) and not before_death:
                return False  # stopped from outside once it served (Ctrl-C, a notebook's interrupt)
            return g.first.line_no > healthy_line and (
                g.tier_rank == 0 or _killed_its_process(g) or before_death
            )
        return True

    def _killed_its_process(g: _Group) -> bool:
        """It unwound an engine subprocess's entry function, or a process's own entry point
        with nothing after it (a failed request unwinds only to the web server's handler)."""
        ev = g.first
        if ev.exc_type is None:
            return False
        if any(_ENGINE_PROCESS_FRAME.search(f) for f in ev.lines):
            return True  # it unwound an engine subprocess's entry point: that process is gone
        return lines_read - ev.line_no <= _LAST_WORDS and any(_TOP_LEVEL_FRAME.search(f) for f in ev.lines)

    candidates = [g for g in groups.values() if candidate(g)]
    for g in candidates:
        g.survived = _survived(g, asm.phase_marks)
    by_line = {g.first.line_no: g for g in candidates}

    def line_of(g: _Group) -> float:
        wrapped = by_line.get(g.first.wraps) if g.first.wraps is not None else None
        if (
            wrapped is not None
            and g.match is not None
            and wrapped.match is not None
            and wrapped.tier_rank == g.tier_rank
            and g.match.signature.priority > wrapped.match.signature.priority
        ):
            return wrapped.first.line_no - 0.5
        return g.first.line_no

    root, root_basis = _choose(candidates, line_of)
    if root is not None and root.survived and root.first.is_warning and root.first.exc_type is None:
        # the worst the launch printed is a warning its process went on from: nothing failed
        # by what the log shows (where it stopped may still tell a hang, below)
        root = None
    others = sorted(
        (g for g in groups.values() if g is not root), key=lambda g: (g.first.launch != last, g.first.line_no)
    )
    stale_reasons = []
    if asm.launch > 0:
        stale_reasons.append(
            f"the log holds {asm.launch + 1} launches ({_reasons_str(asm.launch_reasons)}); "
            "only the last one is diagnosed"
        )
    if asm.old_lines:
        stale_reasons.append(
            f"{asm.old_lines} lines (first at line {asm.first_old_line}) are older than the run's start; they were "
            f"ignored"
        )
    root_cause = _cause(root, root_basis, engine) if root else None
    if root_cause is not None and root.match is None and root.first.stack:
        root_cause = _at_the_wait(root_cause, root.first)
    if root_cause is not None and root.first.diagnostic is not None:
        root_cause = _at_the_compiler_error(root_cause, root.first)
    explainer = _explained_by_earlier_cause(root, root_cause, candidates) if root else None
    if explainer is not None:
        root_cause = _explained(root_cause, _cause(explainer, engine=engine))
    alternatives = _alternatives(root, root_cause, candidates) if root else ()
    rivals = ("signature", "warning-explains", "rival")
    if root_cause is not None and any(a.basis in rivals for a in alternatives):
        root_cause = replace(root_cause, confidence=min(root_cause.confidence, _COMPETED))
    remedies = root.match.remedies if root and root.match else ()
    if explainer is not None and explainer.match is not None:
        remedies = explainer.match.remedies
    if healthy_line is None and tail and (root is None or _rank(root) >= _WARNING_CAUSE_RANK):
        # nothing failed but warnings (a child's leaked-shared-memory notice as it dies): where
        # the log stopped says more than the warning does
        stalled = _stall_cause(tail, last)
        if stalled is not None:
            if root_cause is not None:
                alternatives = (replace(root_cause, confidence=round(root_cause.confidence * 0.6, 2)), *alternatives)
            root_cause, remedies = stalled
    if guess_sole_line and root_cause is None and healthy_line is None and tail and lines_read == len(tail):
        sole = _sole_line_cause(tail, last)
        if sole is not None:
            root_cause = sole
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
        alternatives=alternatives,
    )


def _choose(candidates: list[_Group], line_of) -> tuple[_Group | None, str | None]:
    """The root cause by rule 4, and its basis when a warning was taken to explain an error."""
    if not candidates:
        return None, None
    waiting = [g for g in candidates if g.match is not None and g.match.signature.waits_on_peers]
    if waiting:
        # causal order across processes: ranks that timed out waiting for a collective waited
        # on a peer; a fatal error of another process (an OOM, a worker that died) is why
        waiters = {g.first.process for g in waiting}
        failed = [g for g in candidates if g not in waiting and _rank(g) <= _TIER_RANK[None]
                  and (g.first.process not in waiters or g.first.process is None)]
        if failed:
            candidates = failed
    best = min(_rank(g) for g in candidates)
    tied = [g for g in candidates if _rank(g) == best]
    # a known message seen both in a progress line and in an error line (vLLM's INFO
    # "Available KV cache memory: -1.66 GiB", then its ValueError "No available memory for
    # the cache blocks"): the error line is where the failure is reported
    raised = {g.match.signature.id for g in tied if g.match is not None and g.first.is_error}
    tied = [g for g in tied if g.first.is_error or g.match is None or g.match.signature.id not in raised]
    root = _first(tied, line_of)
    if best == _TIER_RANK["generic"]:
        # a known cause printed as a warning explains a vague fatal error of the same launch
        # (NCCL prints its WARN lines and raises "unhandled system error" in either order)
        explaining = [g for g in candidates if _rank(g) == _WARNING_CAUSE_RANK]
        if explaining:
            return _first(explaining, line_of), "warning-explains"
        if root.match.signature.consequence:
            # a death reported after an error no signature knows: the error is what the
            # process died of (vLLM's CUDACHECK prints "Failed: Cuda error FILE:LINE" and
            # exits, then the engine core reports "Worker proc ... died unexpectedly"; ggml's
            # "ROCm error: unspecified launch failure" follows the HSA runtime's own report)
            before = [g for g in candidates if _TIER_RANK[None] <= _rank(g) <= _PLAIN_UNKNOWN_RANK
                      and _earlier(g, root, line_of)]
            if before:
                return _first(before, line_of), None
    return root, None


def _explained_by_earlier_cause(
    root: _Group, root_cause: Cause, candidates: list[_Group]
) -> _Group | None:
    """A known cause the launch printed and went on from (a later phase of its process followed
    it), before an echo that only says the launch failed and names nothing placeable.

    The echo keeps its line (it is where the launch stopped), the earlier cause names its
    category: llama.cpp's fit step warns "failed to fit params to free device memory" and loads
    anyway, and the load then dies of the device ("error loading model: vk::Queue::submit:
    ErrorDeviceLost"). A device runtime's status says what happened to the device, not why
    (runtime_status.py): a device lost or out of memory after such a cause is that cause's, so
    an error placed only by its status is explained the same way. A fatal exception of its own
    is never explained away by a warning.
    """
    placed_by_status = root_cause.basis == "runtime-status"
    if not placed_by_status and (root_cause.category != "other" or root_cause.basis != "echo"):
        return None
    earlier = [
        g for g in candidates
        if g is not root and g.match is not None and g.match.tier == "cause"
        and not g.match.signature.benign and g.match.category != "other"
        and g.survived and g.first.line_no < root.first.line_no
    ]
    return min(earlier, key=lambda g: g.first.line_no) if earlier else None


def _explained(fatal: Cause, earlier: Cause) -> Cause:
    return replace(
        fatal,
        category=earlier.category,
        explanation=f"{fatal.explanation} Before it, line {earlier.line} said: "
        f"{earlier.explanation}",
        confidence=CONFIDENCE["warning-explains"],
        basis="warning-explains",
    )


def _earlier(a: _Group, b: _Group, line_of) -> bool:
    """Whether `a` came before `b`: in time when both are stamped, else in the file."""
    ka, kb = _time_key(a.first.timestamp), _time_key(b.first.timestamp)
    if ka and kb and ka != kb:
        return ka < kb
    return line_of(a) < line_of(b)


def _alternatives(root: _Group, root_cause: Cause, candidates: list[_Group]) -> tuple[Cause, ...]:
    """Competing readings (rule 7), each with its own confidence, best first."""
    out: list[Cause] = []
    seen = {root_cause.category}
    m = root.match
    if m is not None and root_cause.basis == "signature-bare":
        # the phases the same message could have come from, had the log shown one
        for _phase, category, explanation in m.signature.by_phase:
            if category not in seen:
                seen.add(category)
                out.append(replace(root_cause, category=category, explanation=explanation.replace("{alloc}", "?"),
                                   confidence=CONFIDENCE["phase-unknown"], basis="phase-unknown"))
    if m is not None:
        # a second reading the message itself gives (the attention selector's reasons)
        for category, explanation in m.rivals:
            if category not in seen:
                seen.add(category)
                out.append(replace(root_cause, category=category, explanation=explanation,
                                   confidence=CONFIDENCE["rival"], basis="rival"))
    ranked = sorted(
        (g for g in candidates if g is not root and g.match is not None), key=lambda g: (_rank(g), g.first.line_no)
    )
    for g in ranked:
        cause = _cause(g)
        if cause.category in seen or cause.basis == "echo":
            continue
        seen.add(cause.category)
        # a rival reading is never as sure as the chosen one
        out.append(replace(cause, confidence=round(min(cause.confidence, root_cause.confidence) * 0.6, 2)))
    return tuple(out[:_ALTERNATIVES_SHOWN])
