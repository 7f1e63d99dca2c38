"""Parsed lines to error events: tracebacks reassembled per process, launches counted.

Several processes write into one log at once, so their traceback lines interleave. Every
line carries its process prefix (or none), and a traceback is collected per (process, pid)
until its exception line closes it. vLLM's multiproc executor logs a worker's traceback
line by line at ERROR level (`(Worker_TP4 pid=1) ERROR ... [multiproc_executor.py:751]
Traceback ...`); a run of ERROR lines without a Traceback header (a Triton compile error
echo, a pasted excerpt) is collected the same way and closed by its exception line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from servepilot.triage.cuda_archs import archs_leaving_out, device_capability
from servepilot.triage.lines import LogLine, parse_line
from servepilot.triage.markers import (
    banner_kind,
    is_aborted,
    is_healthy,
    is_unique_process_name,
    phase_of,
)

# `ValueError: msg`, `torch.OutOfMemoryError: msg`, `ncclSystemError: msg`, a bare
# `KeyboardInterrupt`, Python's plain `Exception: msg` (SGLang raises it, e.g. "Capture cuda
# graph failed", sglang/srt/model_executor/cuda_graph_runner.py), and Triton's repr form
# `ValueError("msg")`.
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*|nccl\w+)(?:Error|Exception|Exit|Interrupt|Warning|Fault)|"
    r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*Error\w*|Exception)"
    r"(?::\s?(?P<msg>.*)|\((?P<repr>.*)\))?$"
)
_TRACEBACK_HEAD = "Traceback (most recent call last)"
_CLASS_NAME = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*")
# After a traceback's frames, Python prints the exception as "module.Class: message".
_TRACEBACK_END = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z][A-Za-z0-9_]*)(?::\s?(?P<msg>.*))?$")
_CHAIN = re.compile(
    r"^(?:The above exception was the (?P<direct>direct cause) of the following exception"
    r"|During handling of the above exception, another exception occurred)"
)
# A traceback frame. Issue excerpts often start mid-traceback, without the header line.
# A frame pasted into markdown may carry the code fence's backtick or a quote mark before it.
_FRAME = re.compile(r'^[`>]*\s*File "[^"]*", line \d+')
# A traceback's code line that lost its frame line (cut, or pasted apart from it): source
# text, not an error, however many error words it holds ('raise RuntimeError(f"Failed ...")').
_CODE_LINE = re.compile(r"^(?:raise|return|assert|await)\b.*[(\[]")
# libstdc++'s report of an uncaught C++ exception: the type on one line, its what() on the next.
_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
# argparse's exit on a refused command line: "prog: error: unrecognized arguments: ..."
# (Lib/argparse.py ArgumentParser.error, which exits with status 2; vLLM and SGLang use it).
_ARGPARSE_EXIT = re.compile(r"^[\w.\-]+(?: [\w.\-]+)?: error: ")
# A server's shutdown lines (uvicorn/lifespan/on.py and uvicorn/server.py@0.30.6: "Waiting for
# application shutdown.", "Application shutdown complete.", "Shutting down", "Finished server
# process [%d]"): under a new pid they are an older run ending into a reused log, not a launch.
_SHUTDOWN = re.compile(
    r"^(?:Waiting for application shutdown|Application shutdown (?:complete|failed)|Shutting down\b"
    r"|Finished server process)"
)
_WHAT = re.compile(r"^\s*what\(\):\s*(?P<message>.+)")
# Triton's CompilationError prints a message over several lines (triton/compiler/errors.py
# CompilationError._format_message@v3.8.0, the same since v3.0): "at LINE:COL:", up to 12
# lines of the kernel's source, a caret under the failing column, then the inner error
# (code_generator.py raises it with repr(e): 'ValueError("type fp8e4nv not supported ...")').
_COMPILE_AT = re.compile(r"CompilationError: at \d+:\d+:$")
_CARET = re.compile(r"^\s*\^\s*$")
_COMPILE_SOURCE_MAX = 12  # Triton's source_line_count_max_in_message
# torch_npu's report of an operator that failed asynchronously points elsewhere: "RuntimeError:
# The Inner error is reported as above. The process exits for this inner error, and the current
# working operator name is X." Its message goes on with two notes ("Since the operator is called
# asynchronously ...", "Note: ASCEND_LAUNCH_BLOCKING=1 ..."), its own code line ("[ERROR] <time>
# (PID:n, Device:n, RankID:n) ERR00100 PTA call acl api failed.") and CANN's error message, whose
# code line ("EZ3002: [PID: n] ... Optype [TransData] of Ops kernel [AIcoreEngine] is
# unsupported ...") is the inner error it points at (as vLLM-Ascend logs print it:
# https://github.com/vllm-project/vllm-ascend/issues/1383, /issues/2260).
_NPU_POINTER = re.compile(r"\bThe Inner error is reported as above\b")
# An exception whose message ends by announcing a build's output ("Ninja build failed. Ninja
# output:", FlashInfer's JIT, and SGLang's "Capture cuda graph failed: <that message>" around
# it, as in https://github.com/jethac/dgx-spark-hijinks/blob/61d0a48745223b7d51dd481059afae3bfc1f74d8/
# results/sglang_qwen25_1_5b_fp4kv_patched_flashinfer_20260608T0349JST_startup.log): the lines
# after it are the build tool's output, and the compiler's first error diagnostic in them
# (nvcc's "file(117): error: msg", gcc's and clang's "file:12:5: error: msg") is what failed.
_BUILD_OUTPUT = re.compile(r"\b(?:build|compil\w*)\b.*\boutput:\s*$", re.IGNORECASE)
_COMPILER_ERROR = re.compile(r"^\S+?(?:\(\d+\)|:\d+(?::\d+)?): (?:fatal )?error: ")
_BUILD_OUTPUT_LINES = 400  # a build's output longer than this is not searched for its error
# asyncio's report of a task that failed with nobody awaiting it, printed when the task object
# is garbage-collected (Future.__del__ in Lib/asyncio/futures.py@3.11: "%s exception was never
# retrieved", then "future: <Task ...>" and the traceback): it is printed when the orphan is
# collected, typically while the process tears down after its real failure (vLLM 0.6's client
# destroying its ZeroMQ context under polling tasks once the engine process has died,
# vllm/engine/multiprocessing/client.py@v0.6.6 close()), not when the task failed.
_ORPHAN_REPORT = re.compile(r"^(?:Task|Future) exception was never retrieved$")
_NPU_NOTE = re.compile(
    r"^(?:Since the operator is called asynchronously|Note: ASCEND_LAUNCH_BLOCKING"
    r"|(?:\[ERROR\] )?\S+ \(PID:\d+, Device:-?\d+, RankID:-?\d+\) ERR\d{5}\b)"
)
_CANN_CODE = re.compile(r"^E[A-Z0-9]\d{4}: ")  # CANN's error codes: EZ3002, EE9999, EI0006, ...
# pydantic's ValidationError prints its header, then per error an optional location line, the
# indented message with its type ("  Value error, <msg> [type=value_error, input_value=...,
# input_type=...]") and a link (pydantic_core ValidationError.__str__, as pydantic 2.13.4
# prints it; vLLM's config classes are pydantic dataclasses, so its config refusals come as
# "1 validation error for ModelConfig" and a "Value error, ..." line). The header names no
# cause; the first error's message is what failed.
_VALIDATION_HEADER = re.compile(r"^\d+ validation errors? for \S+$")
_VALIDATION_DETAIL = re.compile(r" \[type=\w+(?:,|\])")
# Settings a launch prints about itself that change what an error means (refine rules read
# them): an FP8 KV cache, from vLLM's engine config line (`kv_cache_dtype=fp8`), its args
# (`'kv_cache_dtype': 'fp8'`) or its notices ("Using fp8 data type to store kv cache",
# vllm/config.py@v0.4.0; "Cannot use FlashAttention-2 backend for FP8 KV cache",
# vllm/attention/selector.py@v0.6.0). The hint's name is spelt so that it matches no refine
# rule that reads KV words in frames ("kv_cache", "kv cache"): an FP8 KV launch whose
# weights do not fit is still a weights OOM; only the rules that name "fp8-kv-cache" use it.
# The KV cache dtype a launch asked for, as SGLang's and vLLM's argument dumps print it
# (`kv_cache_dtype='fp4_e2m1'` in ServerArgs, `'kv_cache_dtype': 'fp8'` in vLLM's non-default
# args, `kv_cache_dtype=fp8` in its engine config line); "auto" names none.
_KV_DTYPE_SETTING = re.compile(r"\bkv_cache_dtype'?\s*[=:]\s*'?(?P<dtype>[\w.]+)")
# SGLang's scheduler line once its KV pool is made: the pool's tokens and the model's context
# (sglang/srt/managers/scheduler.py@v0.4.5.post3, @v0.5.23: "max_total_num_tokens=%d,
# chunked_prefill_size=..., context_len=%d"); an input limit is the smaller of the two
# (signatures.sglang_input_limit reads them as launch settings).
_POOL_LINE = re.compile(r"\bmax_total_num_tokens=(?P<pool>\d+),.*\bcontext_len=(?P<ctx>\d+)")
# A traceback's quoted source is no progress line, whatever words it holds: IPython numbers
# its context lines ("    255     logger.info(\"Loading model weights took %.4f GB\",", "--> 24
# self.driver_worker.load_model()", IPython/core/ultratb.py), and a logging call is the source
# of a message, not the message (a notebook's traceback through vLLM's load_model quotes the
# line that would have ended the weights' phase).
_QUOTED_SOURCE = re.compile(r"\b(?:(?:logger|logging)\.\w+|(?:LLAMA|GGML)_LOG_\w+)\(\s*f?[\"']")
_IPYTHON_CONTEXT = re.compile(r"^(?:-+>\s*|\s{2,})\d+\s")
_LAUNCH_HINTS = (
    ("fp8-kv-cache", re.compile(r"kv_cache_dtype'?[=:]\s*'?fp8|FP8 KV cache|fp8 data type to store kv cache", re.I)),
    # llama.cpp's KV cache in a quantized type: its size line names the K and V types in ggml's
    # lower-case names (src/llama.cpp@v0.3.2 "KV self size = ..., K (%s): ...", llama-kv-cache.cpp
    # @v0.3.36 "llama_kv_cache: size = ..., K (%s): ..."), the command line its flags
    ("quantized-kv-cache", re.compile(
        r"\b[KV] \((?:i?q\d|tq\d)\w*\):|(?:--cache-type-[kv]|-ct[kv])[ =]+i?q\d"
    )),
    # a Mac GPU without the SIMD-group features most Metal kernels need (ggml-metal.m@v0.3.2,
    # ggml-metal-device.m@v0.3.36 print "simdgroup reduction   = false" at init)
    ("metal-no-simdgroup", re.compile(r"simdgroup (?:reduction|matrix mul\.)\s*= false")),
)
# A launch that captures no CUDA graphs: vLLM's engine config line ("enforce_eager=True",
# engine/llm_engine.py@v0.5.5, config VllmConfig.__str__@v0.10.2, @v0.19.0) or its non-default
# args ("'enforce_eager': True"), SGLang's ServerArgs dump ("disable_cuda_graph=True",
# server_args.py@v0.4.5.post3). Its warm-up OOM is then no capture's (cuda-oom's refine rules);
# the hint's name holds no graph word, which the capture rules would read.
_NO_GRAPHS = re.compile(r"\benforce_eager'?\s*[=:]\s*True\b|\bdisable_cuda_graph=True\b")
# the cheap gate before the hint regexes (a substring each hint needs)
_HINT_GATES = ("fp8", "FP8", "K (", "V (", "-ct", "cache-type-", "simdgroup")
# A line with no level that still says something failed (C++ engines, shells, NCCL). ggml's
# assertion printed "GGML_ASSERT: %s:%d: %s" (ggml.h before 2024, no "failed" in it); a shell
# reports a crashed job as "zsh: abort  python" / "bash: line 1: 42 Killed". The C++ runtime
# reports an uncaught exception as "terminate called after throwing an instance of 'T'" and
# "  what():  <message>" (libstdc++), whose type names glue the word on (vk::DeviceLostError,
# ErrorDeviceLost); ggml's GGML_ABORT prints "file.cpp:line: message" (ggml/src/ggml.c
# ggml_abort); a CPU without the instructions a binary was built for dies of SIGILL
# ("Illegal instruction (core dumped)"); a program refusing its command line says "unknown/unrecognized argument";
# a loader refusing a size says a buffer or model needs more memory than there is.
_PLAIN_ERROR = re.compile(
    r"\berror\b|\bfailed\b|\bFATAL\b|\bBus error\b|Segmentation fault|\bAborted\b|\bKilled\b|CUDA error|NCCL WARN"
    r"|GGML_ASSERT|^(?:zsh|bash|sh): (?:abort|killed)\b"
    r"|terminate called after throwing|\bwhat\(\):|(?-i:::\w*Error\w*|\bError[A-Z]\w+)"
    r"|^[\w./\-]+\.(?:c|cc|cpp|cu|m|mm):\d+: |\billegal instruction\b"
    r"|\b(?:unknown|unrecognized|invalid) (?:command[- ]line )?(?:argument|option)s?\b"
    r"|\b(?:requires|needs) more (?:\w+ )?memory\b|\blarger than (?:the )?(?:\w+ )?maximum\b"
    r"|\b(?:err|errno|error code)[:=] ?-?\d+"
    # the dynamic loader's refusals, which Python pastes often carry without "ImportError:"
    # (glibc elf/dl-load.c and dl-lookup.c: "cannot open shared object file", "file too
    # short", "undefined symbol: <name>")
    r"|cannot open shared object file|: file too short\b|\bundefined symbol: "
    # the HIP runtime finding no kernel build for the GPU in a binary (ROCm clr
    # hipamd/src/hip_fatbin.cpp: "No compatible code objects found for: gfx1152"), logged with
    # no level; what follows is a crash
    r"|\bno compatible code objects found\b"
    # a device runtime's failure status by its C name (the prefixes of runtime_errors.yaml's
    # runtimes), which a reporter's sentence names without any other error word; only those
    # prefixes, so that an environment variable (NCCL_ASYNC_ERROR_HANDLING) is no error
    r"|(?-i:\b(?:CUDA_ERROR|CUBLAS_STATUS|CUDNN_STATUS|HSA_STATUS_ERROR|ZE_RESULT_ERROR"
    r"|UR_RESULT_ERROR|VK_ERROR|PI_ERROR|ACL_ERROR)_(?!SUCCESS\b)[A-Z0-9_]+\b"
    r"|\b(?:hip|cuda)Error(?!None\b)[A-Z]\w+)"
    # an exception a wrapper quotes in code marks (GPUStack's "Deployment failure due to ...:
    # `AssertionError: 151552 is not divisible by 6`"): the line reports that exception
    r"|`[\w.]*(?:Error|Exception): "
    # ggml's CUDA error goes on with where it failed ("  current device: 0, in function alloc
    # at .../ggml-cuda.cu:502", ggml_cuda_error in ggml-cuda.cu of llama-cpp-python 0.3.2's and
    # 0.3.36's vendored llama.cpp): the same report, kept in its run of error lines
    r"|^current device: -?\d+, in function \w"
    # a C function's message that opens with a refusal ("gguf_init_from_file: invalid magic
    # number 67676a74")
    r"|^(?:[a-z_][a-z0-9_]*: +)?(?:invalid|unknown|unsupported|missing|cannot|can't|unable to)\b"
    # a Go program's unrecovered panic (the runtime prints "panic: <value>" and then the
    # goroutines, src/runtime/panic.go printpanics): ollama's runner dies this way when its
    # backend cannot allocate (ml/device.go@v0.32.15 ErrNoMem: "insufficient memory - ...")
    r"|^panic: ",
    re.IGNORECASE,
)
# Words of a refusal in a warning: "amdgpu is not supported", "no compatible GPUs".
_REFUSAL = re.compile(
    r"\b(?:is not supported|are not supported|unsupported|no compatible|unable to|cannot|could not|failed)\b",
    re.IGNORECASE,
)
# `warnings.warn` output: "/x/resource_tracker.py:254: UserWarning: resource_tracker: ..."
_PY_WARNING = re.compile(r"(?:^|\s|:)[A-Z]\w*Warning: ")
_FRAMES_KEPT = 40  # frames kept per traceback for the excerpt and the refine context
_STACK_KEPT = 400  # traceback lines kept for a stop from outside (an HTTP read is ~190 lines deep)
# Exceptions that stop a process from outside (diagnosis._INTERRUPTIONS): their traceback is
# where the process was when the stop came.
STOPS = frozenset({"KeyboardInterrupt", "SystemExit", "CancelledError"})
# Past this many events, an event whose process and message shape (numbers blanked) were
# already seen is only counted: a log with a million failed requests stays in bounded memory.
_EVENTS_KEPT = 50_000
_DIGITS = re.compile(r"\d+")


@dataclass
class ErrorEvent:
    """One error as the log shows it: an exception (with its traceback) or an error line."""

    line_no: int
    process: str | None
    pid: int | None
    launch: int
    exc_type: str | None
    message: str  # "ValueError: ..." as printed, or the error line's message
    lines: list[str] = field(default_factory=list)  # traceback / block lines before it
    text: str = ""  # the cleaned line as printed (excerpt)
    chained: bool = False  # printed after "The above exception was the direct cause ..."
    is_error: bool = True  # False: a plain line kept only in case a signature knows it
    block: list[tuple[int, str]] = field(default_factory=list)  # a run of error lines (number, text)
    phase: str | None = None  # the start-up phase the log was in (markers.PHASES, or "serving")
    hints: tuple[str, ...] = ()  # launch settings seen before it (_LAUNCH_HINTS), e.g. "fp8-kv-cache"
    kv_dtype: str | None = None  # the KV cache dtype the launch asked for (_KV_DTYPE_SETTING)
    wraps: int | None = None  # line of the exception this one was raised from ("direct cause")
    # line of the error that says what this exception failed on, where its own message names
    # only a place (Triton's "CompilationError: at 322:24:", whose inner error follows it)
    told_by: int | None = None
    orphaned: bool = False  # an unawaited task's exception, reported at collection (_ORPHAN_REPORT)
    # the compiler's first error in the build output its message announced (_BUILD_OUTPUT)
    diagnostic: tuple[int, str] | None = None
    # a stop from outside (STOPS): its whole traceback, numbered, to tell where it waited (waits.py)
    stack: list[tuple[int, str]] = field(default_factory=list)
    level: str | None = None  # the line's log level as printed ("ERROR", "WARNING", ...)
    timestamp: str | None = None  # as printed, for ordering errors of several processes in time

    @property
    def situation(self) -> list[str]:
        """The launch's settings when this happened, for refine rules (the phase goes apart)."""
        return [f"[launch setting: {h}]" for h in self.hints]

    @property
    def is_warning(self) -> bool:
        """Printed as a warning: a WARNING level or a Python `...Warning:` (warnings.warn).

        NCCL's "NCCL WARN" lines are not warnings in this sense: NCCL reports its failures
        that way (the failed system or CUDA call behind "unhandled system error").
        """
        if self.level in ("WARNING", "WARN"):
            return True
        if self.exc_type is not None:
            return self.exc_type.endswith("Warning")
        return _PY_WARNING.search(self.message) is not None

    @property
    def context(self) -> str:
        return "\n".join(self.lines + self.situation)


@dataclass(frozen=True)
class PhaseMark:
    """A line where the start-up entered a phase (markers.PHASES, or "serving")."""

    line_no: int
    launch: int
    process: str | None
    phase: str
    timestamp: str | None


@dataclass
class _Open:
    mode: str  # "tb" or "block"
    lines: list[str] = field(default_factory=list)
    first: tuple[int, LogLine] | None = None
    numbers: list[int] = field(default_factory=list)  # block mode: the line number of each line
    # tb mode: every line of the traceback with its number, kept whole (up to _STACK_KEPT) for a
    # stop from outside, whose frames say where the process waited
    stack: list[tuple[int, str]] = field(default_factory=list)
    headerless: bool = False  # tb mode opened by a frame line, not by "Traceback (most recent call last)"
    # block mode: the start-up phase at its first line (a phase line may close the block, and
    # the run belongs to the phase it was printed in, not to the one that followed it)
    phase: str | None = None


@dataclass
class _Continued:
    """A Triton CompilationError printed; its source excerpt and inner error are to follow."""

    line_no: int  # the CompilationError's line
    frames: list[str]  # its traceback, which the inner error shares
    event: ErrorEvent | None = None  # the CompilationError's own event (told_by is set on it)
    source: list[str] = field(default_factory=list)
    caret_seen: bool = False


_PASTE_MARKUP = re.compile(r"^[*`>_\s]+")  # issue excerpts: **bold**, `code`, > quotes


def exception_parts(message: str) -> tuple[str, str] | None:
    """(type, message) for an exception line, else None."""
    if message[:1] in "*`>_":
        message = _PASTE_MARKUP.sub("", message).rstrip("*`_")
    m = _EXCEPTION.match(message)
    if not m:
        return None
    msg = m.group("msg")
    if msg is None:
        msg = (m.group("repr") or "").strip("'\"")
    return m.group("type"), msg


def parse_timestamp(ts: str, since: datetime) -> datetime | None:
    """A line's timestamp as a datetime in `since`'s year (vLLM prints no year)."""
    try:
        if len(ts) >= 19 and ts[4] == "-":
            return datetime.fromisoformat(ts[:19].replace("T", " "))
        dt = datetime.strptime(f"{since.year}-{ts[:14]}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    # A December line read in January belongs to the year before.
    if dt - since.replace(tzinfo=None) > timedelta(days=180):
        dt = dt.replace(year=dt.year - 1)
    return dt


def _indented(text: str, message: str) -> bool:
    """Whether a message was printed indented (a traceback's code line), prefixes aside."""
    at = text.rfind(message) if message else -1
    return at >= 2 and text[at - 2 : at] == "  "


def _without_code_lines(opened: _Open) -> _Open:
    """A run of error lines less the traceback code lines in it (indented source, carets)."""
    kept = [
        (number, text) for number, text in zip(opened.numbers, opened.lines, strict=True)
        if not _is_code_line(parse_line(text))
    ]
    if len(kept) == len(opened.lines):
        return opened
    first = (kept[0][0], parse_line(kept[0][1])) if kept else None
    lines, numbers = [t for _, t in kept], [n for n, _ in kept]
    return _Open("block", lines, first=first, numbers=numbers, phase=opened.phase)


def _says_what_failed(message: str) -> bool:
    """Whether an error message's words name a cause (keywords.yaml; loaded on first use)."""
    from servepilot.triage.keywords import guess_category

    return guess_category(message) is not None


def _is_code_line(ll: LogLine) -> bool:
    return not ll.message.strip("^~ ") or _indented(ll.text, ll.message)


class Assembler:
    """Feed (line number, raw line) in order; read events, launches and health afterwards."""

    def __init__(self, since: datetime | None = None):
        # Engines stamp lines in local time without a zone: compare in local time.
        self.since = since.astimezone().replace(tzinfo=None) if since and since.tzinfo else since
        self.events: list[ErrorEvent] = []
        self.repeats_dropped = 0
        self._shapes: set[tuple] = set()
        self.launch = 0
        self.launch_reasons: list[str] = []
        self.healthy_launches: dict[int, int] = {}  # launch -> line of its first readiness line
        self.old_lines = 0
        self.first_old_line: int | None = None
        self._open: dict[tuple, _Open] = {}
        self._chain: dict[tuple, int | None] = {}  # key -> line of the exception a "direct cause" chain follows
        self._last_exception: dict[tuple, int] = {}  # key -> line of its last exception event
        self.hints: set[str] = set()
        self.kv_dtype: str | None = None  # the launch's KV cache dtype (_KV_DTYPE_SETTING)
        self._seen_banners: set[tuple[str, str | None]] = set()
        self._pids: dict[str, int] = {}
        # SGLang logs "Scheduler hit an exception: Traceback ..." as one message whose later
        # lines carry no prefix; those lines belong to the process that opened it.
        self._inline_key: tuple | None = None
        self.phase: str | None = None
        # where each process entered each start-up phase; an error followed by a later phase
        # of its own process was survived (diagnosis.py rule 4)
        self.phase_marks: list[PhaseMark] = []
        self._marked: set[tuple[str | None, str]] = set()
        self._refused_at: int | None = None  # line of an argparse refusal (the process exited 2)
        # key -> a Triton CompilationError whose message is still being printed (_Continued)
        self._continued: dict[tuple, _Continued] = {}
        # key -> torch_npu's pointer exception, held until its message's lines are read
        self._pointer: dict[tuple, ErrorEvent] = {}
        self._location_seen: set[tuple] = set()  # a ValidationError's location line was read
        self._orphan_reported: set[tuple] = set()  # keys whose next exception is an orphaned task's
        # key -> an exception whose build output follows (_read_build_output)
        self._build_output: dict[tuple, ErrorEvent] = {}
        self._cuda_devices: dict[int, int] = {}  # ggml-cuda device -> capability (cuda_archs.py)

    # -- launches --------------------------------------------------------------------------
    def _new_launch(self, line_no: int, why: str) -> None:
        self._flush_all()
        self.launch += 1
        self.launch_reasons.append(f"line {line_no}: {why}")
        self._seen_banners.clear()
        self._refused_at = None
        self._pids.clear()
        self.phase = None
        self.phase_marks = []  # only the last launch is diagnosed
        self._marked = set()
        self.hints = set()
        self.kv_dtype = None
        self._cuda_devices = {}

    def _track_launch(self, line_no: int, ll: LogLine) -> None:
        kind = banner_kind(ll.message)
        if kind:
            key = (kind, ll.process)
            if key in self._seen_banners:
                self._new_launch(line_no, f"second start-up banner ({ll.message[:60]!r})")
            elif self._refused_at is not None:
                # the command line was refused and that process exited: whatever starts now
                # is a retry (a wrapper that dropped the flag), not the refused process
                self._new_launch(line_no, f"start-up banner after the command line was refused at line "
                                          f"{self._refused_at}")
            self._seen_banners.add(key)
        elif ll.process is None and _ARGPARSE_EXIT.match(ll.message):
            self._refused_at = line_no
        if ll.process and ll.pid is not None and is_unique_process_name(ll.process):
            known = self._pids.get(ll.process)
            other_pid = known is not None and known != ll.pid
            # a shutdown line under another pid is an older run of that name ending into the
            # same log, not a launch of this one
            if not (other_pid and _SHUTDOWN.search(ll.message) is not None):
                if other_pid:
                    self._new_launch(line_no, f"{ll.process} has a new pid ({known} -> {ll.pid})")
                self._pids[ll.process] = ll.pid
        if is_healthy(ll.message):
            self.healthy_launches.setdefault(self.launch, line_no)
            self._enter_phase(line_no, ll, "serving")  # an OOM from here on is a request's
        elif is_aborted(ll.message):
            self.healthy_launches.pop(self.launch, None)
        if ll.level not in ("ERROR", "CRITICAL"):
            quoted = _QUOTED_SOURCE.search(ll.message) or _IPYTHON_CONTEXT.match(ll.text)
            phase = None if quoted else phase_of(ll.message)
            if phase is not None:
                self._enter_phase(line_no, ll, phase)
            if any(gate in ll.message for gate in _HINT_GATES):  # cheap gate before the regexes
                for hint, pattern in _LAUNCH_HINTS:
                    if pattern.search(ll.message):
                        self.hints.add(hint)
            if "max_total_num_tokens=" in ll.message:
                m = _POOL_LINE.search(ll.message)
                if m:
                    self.hints.add(f"sglang-pool-tokens={m.group('pool')}")
                    self.hints.add(f"sglang-context-len={m.group('ctx')}")
            eager_words = "enforce_eager" in ll.message or "disable_cuda_graph" in ll.message
            if eager_words and _NO_GRAPHS.search(ll.message):
                self.hints.add("eager-mode")
            if "kv_cache_dtype" in ll.message:
                m = _KV_DTYPE_SETTING.search(ll.message)
                if m and m.group("dtype") != "auto":
                    self.kv_dtype = m.group("dtype")

    def _enter_phase(self, line_no: int, ll: LogLine, phase: str) -> None:
        # the first line of each process in each phase is kept as a mark; a phase's line that
        # reports a failure ("llama_init_from_model: failed to initialize the context") places
        # the errors after it, but is no sign the process went on
        if (ll.process, phase) not in self._marked and _PLAIN_ERROR.search(ll.message) is None:
            self._marked.add((ll.process, phase))
            mark = PhaseMark(line_no, self.launch, ll.process, phase, ll.timestamp)
            self.phase_marks.append(mark)
        self.phase = phase

    # -- events ----------------------------------------------------------------------------
    def feed(self, line_no: int, raw: str) -> None:
        ll = parse_line(raw)
        if self.since and ll.timestamp:
            ts = parse_timestamp(ll.timestamp, self.since)
            if ts is not None and ts < self.since:
                self.old_lines += 1
                if self.first_old_line is None:
                    self.first_old_line = line_no
                return
        self._track_launch(line_no, ll)
        self._check_cuda_archs(line_no, ll)
        self._feed_error(line_no, ll)

    def _check_cuda_archs(self, line_no: int, ll: LogLine) -> None:
        """A llama.cpp build without code for a GPU it found is an error of its own, on the
        line that lists the build's architectures (cuda_archs.py)."""
        if "compute capability" in ll.text:
            found = device_capability(ll.text)
            if found is not None:
                self._cuda_devices[found[0]] = found[1]
        elif self._cuda_devices and "ARCHS" in ll.text:
            message = archs_leaving_out(ll.text, self._cuda_devices)
            if message is not None:
                ev = ErrorEvent(
                    line_no, ll.process, ll.pid, self.launch, None, message, text=ll.text
                )
                self._add(ev, ll)

    def _feed_error(self, line_no: int, ll: LogLine) -> None:
        key = (ll.process, ll.pid)
        msg = ll.message
        bare = ll.process is None and ll.pid is None and ll.level is None and ll.timestamp is None
        if bare and self._inline_key is not None and self._inline_key in self._open:
            key = self._inline_key
        if key in self._continued and self._continue_message(line_no, key, ll):
            return
        if key in self._pointer and self._continue_pointer(line_no, key, ll):
            return
        if key in self._build_output:
            self._read_build_output(line_no, key, ll)
        opened = self._open.get(key)
        inline = msg.find(_TRACEBACK_HEAD)
        if inline > 0:
            # "<what happened>: Traceback (most recent call last):" in one message; IPython heads
            # its traceback with the bare exception class ("OutOfMemoryError      Traceback (most
            # recent call last)", IPython/core/ultratb.py), which its exception line repeats
            # with the message at the end: that header is no error of its own
            said = msg[:inline].strip()
            if not _CLASS_NAME.fullmatch(said):
                said_event = ErrorEvent(
                    line_no, ll.process, ll.pid, self.launch, None, said, [], ll.text
                )
                self._add(said_event, ll)
            msg = msg[inline:]
            self._inline_key = key
        if msg.startswith(_TRACEBACK_HEAD):
            if opened and opened.mode == "block":
                self._close_block(key)
            # a traceback still open here was cut short (no exception line): its frames are
            # dropped; a message printed inside it was already kept as a plain line (below)
            self._open[key] = _Open("tb", [ll.text], stack=[(line_no, ll.text)])
            return
        if _ORPHAN_REPORT.match(msg):
            if opened and opened.mode == "block":
                self._close_block(key)
            self._orphan_reported.add(key)
            return
        chain = _CHAIN.match(msg)
        if chain:
            self._chain[key] = self._last_exception.get(key) if chain.group("direct") else None
            if opened and opened.mode == "block":
                self._close_block(key)
            return
        exc = exception_parts(msg)
        if exc is None and opened is not None and opened.mode == "tb" and not _indented(ll.text, msg):
            # the line that closes a traceback is its exception, whatever the class is called
            # (Triton's OutOfResources, a library's FooTimeout): "module.Class: message"
            end = _TRACEBACK_END.match(msg)
            if end is not None:
                exc = (end.group("type"), end.group("msg") or "")
        if exc is not None:
            context = self._open.pop(key, None)
            if context is not None and context.mode == "block":
                # its lines may name the cause (NCCL WARN ...); the code lines of a traceback
                # whose header was cut (vLLM logs each line of one at ERROR level) are frames
                self._append_block(_without_code_lines(context))
            chained = key in self._chain
            wraps = self._chain.pop(key, None)
            if _NPU_POINTER.search(msg) or _VALIDATION_HEADER.match(exc[1]):
                ev = ErrorEvent(line_no, ll.process, ll.pid, self.launch, exc[0], msg,
                                context.lines if context else [], ll.text, chained, wraps=wraps)
                ev.phase, ev.level, ev.timestamp = self.phase, ll.level, ll.timestamp
                self._pointer[key] = ev
                self._last_exception[key] = line_no
                return
            frames = context.lines if context else []
            emitted = self._emit(
                line_no, key, ll, exc[0], msg, frames, chained=chained, wraps=wraps
            )
            if context is not None and context.stack and exc[0].rsplit(".", 1)[-1] in STOPS:
                emitted.stack = context.stack
            if key in self._orphan_reported:
                self._orphan_reported.discard(key)
                emitted.orphaned = True
            if _BUILD_OUTPUT.search(msg):
                self._build_output[key] = emitted
            self._last_exception[key] = line_no
            if _COMPILE_AT.search(msg):
                self._continued[key] = _Continued(line_no, frames, event=emitted)
            if key == self._inline_key:
                self._inline_key = None
            return
        message_line = bool(msg) and not _FRAME.match(msg) and not _indented(ll.text, msg) and bool(msg.strip("^~ "))
        if opened and opened.mode == "tb" and opened.headerless and message_line:
            # frames without a header are only the run of frame and code lines; a message line
            # ends them (a faulthandler dump has frames but no exception line to close it)
            del self._open[key]
            opened = None
        if opened and opened.mode == "tb":
            opened.lines.append(ll.text)
            opened.stack.append((line_no, ll.text))
            if len(opened.lines) > _FRAMES_KEPT:
                # the header and the outermost frame (a process's entry point) stay with the last ones
                del opened.lines[2:-_FRAMES_KEPT]
            if len(opened.stack) > 2 * _STACK_KEPT:
                del opened.stack[:-_STACK_KEPT]
            if message_line:
                # A message printed inside a traceback (transformers prints "The repository
                # for X contains custom code ..." before an EOFError): a signature may know it.
                self._add(
                    ErrorEvent(line_no, ll.process, ll.pid, self.launch, None, msg, [], ll.text, is_error=False), ll
                )
            return
        if _FRAME.match(msg):
            # a traceback pasted or cut without its header line: its frames are the context
            if opened is not None and opened.mode == "block":
                # the code lines before the first whole frame (a frame cut at the paste's top
                # edge, vLLM logging each traceback line at ERROR level) are that traceback's,
                # as when an exception line closes the run
                self._append_block(_without_code_lines(self._open.pop(key)))
            elif opened is not None:
                self._close_block(key)
            self._open[key] = _Open("tb", [ll.text], headerless=True, stack=[(line_no, ll.text)])
            return
        is_error_line = ll.level in ("ERROR", "CRITICAL") or (
            ll.level is None and _PLAIN_ERROR.search(msg) is not None
            and not (_indented(ll.text, msg) and _CODE_LINE.match(msg))
        ) or (
            # a warning that says something was refused: an unknown cause of the lowest rank,
            # so that a log with nothing worse still names the line (diagnosis orders it last)
            ll.level == "WARNING" and _REFUSAL.search(msg) is not None
        )
        if is_error_line:
            if opened is None:
                opened = self._open[key] = _Open("block", first=(line_no, ll), phase=self.phase)
            if len(opened.lines) < _FRAMES_KEPT:  # the first lines of a run say what happened
                opened.lines.append(ll.text)
                opened.numbers.append(line_no)
            return
        if opened and opened.mode == "block":
            self._close_block(key)
        if msg and ll.level != "DEBUG":
            # A non-error line can still be a known message (a benign fallback notice, an
            # engine message pasted without its exception type): a signature may know it.
            self._add(
                ErrorEvent(line_no, ll.process, ll.pid, self.launch, None, msg, [], ll.text, is_error=False), ll
            )

    def _read_build_output(self, line_no: int, key: tuple, ll: LogLine) -> None:
        """Note the compiler's first error diagnostic in the output an exception announced; a
        new traceback or exception, or a long output, ends the search. The line is still read
        as any other line."""
        ev = self._build_output[key]
        msg = ll.message
        if _COMPILER_ERROR.match(msg):
            ev.diagnostic = (line_no, ll.text)
            del self._build_output[key]
        elif (
            line_no - ev.line_no > _BUILD_OUTPUT_LINES or msg.startswith(_TRACEBACK_HEAD)
            or _CHAIN.match(msg) or exception_parts(msg) is not None
        ):
            del self._build_output[key]

    def _continue_message(self, line_no: int, key: tuple, ll: LogLine) -> bool:
        """Whether the line continues a CompilationError's message (and was taken as such).

        Its source lines are kernel code, not errors; the line after the caret is the inner
        error, which says what failed: it becomes an exception event raised from the
        CompilationError, with the traceback's frames and the source as its context.
        """
        cont = self._continued[key]
        msg = ll.message
        if cont.caret_seen:
            del self._continued[key]
            if not msg.strip():
                return False
            exc = exception_parts(msg)
            lines = cont.frames + cont.source
            self._emit(line_no, key, ll, exc[0] if exc else None, msg, lines, chained=True, wraps=cont.line_no)
            self._last_exception[key] = line_no
            if cont.event is not None:
                # "at LINE:COL:" names where in the kernel, the inner error what failed there
                cont.event.told_by = line_no
            return True
        if _CARET.match(msg):
            cont.caret_seen = True
            cont.source.append(ll.text)
            return True
        if len(cont.source) >= _COMPILE_SOURCE_MAX or _TRACEBACK_HEAD in msg or _CHAIN.match(msg):
            del self._continued[key]  # no caret came: not Triton's format after all
            return False
        cont.source.append(ll.text)
        return True

    def _continue_pointer(self, line_no: int, key: tuple, ll: LogLine) -> bool:
        """Whether the line continues torch_npu's pointer message (and was taken as such).

        Its notes are part of the exception. CANN's error code line is the inner error the
        pointer names: the exception is reported there, its own line becoming context.
        Any other line ends the message and the exception is reported where it was printed.
        """
        pointer = self._pointer[key]
        if not _NPU_POINTER.search(pointer.message):  # the other kind held: a ValidationError
            return self._continue_validation(line_no, key, ll)
        if _NPU_NOTE.match(ll.message):
            pointer.lines.append(ll.text)
            return True
        del self._pointer[key]
        if _CANN_CODE.match(ll.message):
            inner = replace(pointer, line_no=line_no, message=ll.message, text=ll.text,
                            lines=[*pointer.lines, pointer.text])
            self._add_held(inner, ll)
            return True
        self._add_held(pointer, None)
        return False

    def _continue_validation(self, line_no: int, key: tuple, ll: LogLine) -> bool:
        """A pydantic ValidationError's first error: reported at its message line when its
        words say what failed (the header names only the class that refused).

        A location line may come first (no error words: it passes as an ordinary line).
        """
        header = self._pointer[key]
        msg = ll.message
        if _VALIDATION_DETAIL.search(msg) and _indented(ll.text, msg):
            if not _says_what_failed(msg[: _VALIDATION_DETAIL.search(msg).start()]):
                # words that name no cause ("Expecting value: line 1 column 1"): the header
                # stays the report, and this line an error line of its own as before
                del self._pointer[key]
                self._location_seen.discard(key)
                self._add_held(header, None)
                return False
            del self._pointer[key]
            self._location_seen.discard(key)
            inner = replace(header, line_no=line_no, message=msg, text=ll.text,
                            lines=[*header.lines, header.text])
            self._add_held(inner, ll)
            return True
        if msg and " " not in msg.strip() and key not in self._location_seen:
            self._location_seen.add(key)  # the error's location ("model", "body.messages.0")
            return False
        del self._pointer[key]
        self._location_seen.discard(key)
        self._add_held(header, None)
        return False

    def _add_held(self, ev: ErrorEvent, ll: LogLine | None) -> None:
        phase, hints = ev.phase, ev.hints
        self._add(ev, ll)
        ev.phase = phase  # the phase it was printed in, not the one that came after
        ev.hints = hints or ev.hints

    def _add(self, ev: ErrorEvent, ll: LogLine | None = None) -> None:
        ev.phase = self.phase
        if ll is not None:
            ev.level, ev.timestamp = ll.level, ll.timestamp
        ev.kv_dtype = self.kv_dtype
        if self.hints:
            ev.hints = tuple(sorted(self.hints))
        if len(self.events) >= _EVENTS_KEPT:
            shape = (ev.process, ev.launch, _DIGITS.sub("#", ev.message[:300]))
            if shape in self._shapes:
                self.repeats_dropped += 1
                return
            self._shapes.add(shape)
        self.events.append(ev)

    def _emit(
        self, line_no, key, ll, exc_type, message, lines, chained=False, wraps=None
    ) -> ErrorEvent:
        process, pid = key
        ev = ErrorEvent(
            line_no, process, pid, self.launch, exc_type, message, list(lines), ll.text, chained,
            wraps=wraps,
        )
        self._add(ev, ll)
        return ev

    def _close_block(self, key) -> None:
        self._append_block(self._open.pop(key))

    def _append_block(self, opened: _Open) -> None:
        if opened.first is None or not opened.lines:
            return
        line_no, ll = opened.first
        exc_type, message, text = None, ll.message, ll.text
        thrown = _TERMINATE.search(ll.message)
        if thrown is not None:
            # a C++ exception says what it is in its what() line: that line is the error
            for number, later in zip(opened.numbers[1:3], opened.lines[1:3], strict=False):
                what = _WHAT.match(parse_line(later).message)
                if what is not None:
                    line_no, exc_type, message, text = number, thrown.group("type"), what.group("message"), later
                    break
        ev = ErrorEvent(
            line_no, ll.process, ll.pid, self.launch, exc_type, message, [], text,
            block=list(zip(opened.numbers, opened.lines, strict=True)),
        )
        self._add(ev, ll)
        ev.phase = opened.phase  # the phase the run was printed in, not the one that closed it

    def _flush_all(self) -> None:
        self._continued.clear()
        self._orphan_reported.clear()
        self._build_output.clear()
        for key in list(self._pointer):
            self._add_held(self._pointer.pop(key), None)
        for key in list(self._open):
            if self._open[key].mode == "block":
                self._close_block(key)
            else:
                self._open.pop(key)

    def finish(self) -> None:
        self._flush_all()
