"""One log line to its parts: process prefix, level, timestamp, source and message.

Engines print through several layers of prefixes, and a line may carry all of them:

    vllm  | (Worker_TP4 pid=207083) ERROR 12-29 15:21:11 [multiproc_executor.py:751] msg
    ^ docker compose  ^ vLLM process prefix   ^ vLLM logging format (vllm/logger.py)

The process prefix is written by `_add_prefix` around stdout/stderr in v0.16
(vllm/utils/system_utils.py@v0.16.0) and is part of the logging format itself in v0.34
(vllm/logger.py@v0.34.0); both look the same on the page, so one pattern serves both.
SGLang puts the rank inside its timestamp bracket (`[2025-01-01 10:00:00 TP3] msg`,
sglang/srt/utils.py `configure_logger`), llama.cpp prints `function: message`, uvicorn
`LEVEL:    message`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# CSI sequences (colours, cursor moves) and OSC titles; tqdm and rich both emit them.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

# `(Worker_TP4 pid=1)`, `(VllmWorker TP0 pid=3974)`, `(VllmWorker rank=3 pid=1090)` (vLLM
# 0.8-0.10's multiproc workers, as in corpus rows), `(RayWorkerWrapper pid=9, ip=10.0.0.2)`,
# Ray Serve's `(ServeReplica:default:VLLMDeployment pid=3262, ip=10.0.0.1)`.
# The opening bracket is optional because excerpts pasted into issues often lose it.
_PROCESS = re.compile(
    r"(?:^|(?<=[\s|]))\(?(?P<process>[A-Za-z][\w.:\-]*(?: [A-Za-z]+\d+| rank=\d+)?) pid=(?P<pid>\d+)"
    r"(?:, ip=(?P<ip>[0-9A-Fa-f.:]+))?\)\s?"
)

# vLLM: `%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s`, date `%m-%d %H:%M:%S`
# (vllm/logger.py@v0.16.0). Before v0.6 the source had no opening bracket:
# `INFO 04-19 17:25:10 api_server.py:149] msg`.
_VLLM_FORMAT = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) "
    r"\[?(?P<src>[\w./\-]+:\d+)\] ?"
)

# SGLang: `[2025-01-01 10:00:00 DP0 TP3] msg` (the rank part is optional); newer releases
# drop the year: `[12-16 14:27:08 TP0] msg`.
_SGLANG_FORMAT = re.compile(
    r"\[(?P<ts>(?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<ranks>(?: (?:DP|PP|TP|EP|CP)\d+)*)\] ?"
)
# A script that calls `logging.basicConfig` itself before starting SGLang's offline Engine (or
# any tool logging as `[%(asctime)s] %(levelname)s %(filename)s:%(lineno)d: %(message)s`) puts
# a level and a source after the bracket: `[2025-11-23 23:34:08] INFO engine.py:123: msg`.
# Without reading the level, an INFO line that dumps ServerArgs would be taken for a message.
_LEVEL_AFTER_BRACKET = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?:(?P<src>[\w./\-]+\.py:\d+):? )?"
)

# A leading ISO timestamp (docker --timestamps, journald, Python logging defaults), then
# optionally a level: `2025-01-01T10:00:00.123Z ERROR msg`, `2025-01-01 10:00:00,123 - x - ERROR - msg`,
# a wrapper's logger name and pid (Xinference: `2024-11-29 05:23:47,651 xinference.core.worker 140
# ERROR    msg`), loguru's `2025-06-01 10:00:00.123 | ERROR    | module:fn:12 - msg`.
# CI runners put it in brackets (Buildkite: `[2025-03-10T15:07:20Z] ERROR 03-10 ...`).
_ISO_PREFIX = re.compile(
    r"\[?(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]?"
    r"(?:\s*(?:-\s*[\w.]+\s*-\s*|\|\s*|[\w.]+(?: \d+)? +)?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b"
    r"(?:\s*\|\s*[\w.:<>\-]+:\d+\s*-|\s*[-:]?))?\s*"
)

# uvicorn's default formatter: `ERROR:    [Errno 98] ...`, `INFO:     Uvicorn running on ...`.
# A bracketed level opens some wrappers' lines: `[ERROR] msg`.
_UVICORN = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+|\[(?P<blevel>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]\s*"
)

# llama.cpp: `llama_model_load: error loading model: ...`, `srv  load_model: failed ...`,
# `main: server is listening on ...` (C function name, lower case, then a colon).
_LLAMACPP = re.compile(r"(?:(?P<tag>srv|slot|que|res)\s+)?(?P<func>[a-z_][a-z0-9_]*):\s+")

# torch.distributed prefixes every line of an uncaught exception with the rank
# (`[rank0]: Traceback ...`, `[rank0]:[W1203 ...] ...`; torch/distributed/elastic log_line_prefix).
_TORCH_RANK = re.compile(r"\[(?P<process>[Rr]ank\d+)\]:\s?")

# glog's format, which torch's C++ logging (c10) and torch._logging write:
# `E0731 16:03:52.115000 116603 site-packages/torch/x.py:539] msg` and, bracketed with no pid,
# `[W613 18:25:21.887897693 ProcessGroupNCCL.cpp:1575] msg`; the first letter is the level.
_GLOG = re.compile(
    r"\[?(?P<level>[EWIF])(?P<ts>\d{3,4} \d\d:\d\d:\d\d\.\d+)(?: +\d+)? (?P<src>[\w./\-]+:\d+)\] ?"
    r"(?:\[\d+/\d+(?:_\d+)?\] )?"  # torch.compile's frame/compile id
)
_GLOG_LEVELS = {"E": "ERROR", "W": "WARNING", "I": "INFO", "F": "CRITICAL"}

# docker compose service column `vllm  | ` and kubectl-style pod prefixes before a process prefix.
_COMPOSE = re.compile(r"[\w.\-]+\s+\|\s")

# `kubectl logs --prefix` (and `--all-containers`): `[pod/vllm-0/vllm] message`, the pod and the
# container before each line (kubectl's logs command, "[pod/%s/%s] ").
_KUBECTL = re.compile(r"\[pod/[\w.\-]+/[\w.\-]+\] ")

# journald's ISO output (`journalctl -o short-iso`, `short-iso-precise`):
# `2026-06-10T07:31:04+0000 host vllm[1234]: message`.
# The host is a host name and the process carries its pid, so that a stamp before a compiler's
# "file.cu(117): error:" or "vllm serve: error:" is not read as one.
_SYSLOG_ISO = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) [\w.\-]+ [\w.\-/@]+\[\d+\]: "
)
# Slurm's `srun --label`: the task number before each line of its stdout/stderr (`0: message`,
# padded to the widest task number: ` 3: message`; srun(1) --label, "prepend task number to
# lines of stdout/err"). What follows keeps its own indentation (a traceback's frames).
_SRUN_LABEL = re.compile(r" {0,4}\d{1,5}: ")

# journald / syslog: `Feb 21 01:41:02 host ollama[402476]: message` (systemd services).
_SYSLOG = re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.\-/@]+(?:\[\d+\])?: ")

# Go's log/slog text format, as ollama writes it around llama.cpp's runner:
# `time=2025-07-29T13:31:47.016+02:00 level=WARN source=amd_windows.go:138 msg="..." key=value`.
_LOGFMT = re.compile(
    r'time=(?P<ts>\S+) level=(?P<level>[A-Z]+) source=(?P<src>\S+) msg=(?P<msg>"(?:[^"\\]|\\.)*"|\S+) ?'
)

_LEVEL_WORDS = {"WARN": "WARNING"}
_QUOTE = re.compile(r"^(?:> ?)+")


@dataclass(frozen=True)
class LogLine:
    """A parsed log line; every part but `text` and `message` may be None."""

    text: str  # ANSI stripped, the last carriage-return segment, no trailing newline
    process: str | None  # "Worker_TP4", "EngineCore_DP0", "APIServer", "TP3", ...
    pid: int | None
    level: str | None  # "ERROR", "WARNING", "INFO", ...
    timestamp: str | None  # as printed: "12-29 15:21:11" or "2025-01-01 10:00:00"
    source: str | None  # "multiproc_executor.py:751", or a llama.cpp function name
    message: str  # what is left after the prefixes


def clean_text(raw: str) -> str:
    """Strip ANSI escapes and keep what a terminal would show after the last `\\r`."""
    raw = raw.rstrip("\r\n")
    if "\r" in raw:
        # A progress bar redraws itself with \r; the terminal shows the last non-empty segment.
        segments = [s for s in raw.split("\r") if s.strip()]
        raw = segments[-1] if segments else ""
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    return raw


def parse_line(raw: str) -> LogLine:
    """Split one raw log line into its prefixes and message; never raises."""
    text = clean_text(raw)
    # a line quoted in markdown ("> [2025-11-06T02:10:00.702Z] KeyError: ...", as issue
    # excerpts paste a log) carries its prefixes after the quote marks
    rest = _QUOTE.sub("", text, count=1) if text[:1] == ">" else text
    process = pid = level = timestamp = source = None
    if rest[:5] == "[pod/" and (m := _KUBECTL.match(rest)):
        rest = rest[m.end() :]
    elif rest[:1].isdigit() and (m := _SYSLOG_ISO.match(rest) or _SRUN_LABEL.match(rest)):
        rest = rest[m.end() :]
    elif rest[:1] == " " and (m := _SRUN_LABEL.match(rest)):
        rest = rest[m.end() :]
    m = _SYSLOG.match(rest)
    if m:
        rest = rest[m.end() :]

    m = _PROCESS.search(rest, 0, 200)
    if m:
        process, pid = m.group("process"), int(m.group("pid"))
        rest = rest[m.end() :]
    elif _COMPOSE.match(rest):
        rest = rest[_COMPOSE.match(rest).end() :]
    m = _TORCH_RANK.match(rest)
    if m:
        process = process or m.group("process")
        rest = rest[m.end() :]

    m = _VLLM_FORMAT.match(rest)
    if m:
        level, timestamp, source = m.group("level"), m.group("ts"), m.group("src")
        rest = rest[m.end() :]
    elif rest[:2].lstrip("[")[:1] in _GLOG_LEVELS and (m := _GLOG.match(rest)):
        level, source = _GLOG_LEVELS[m.group("level")], m.group("src")
        day, clock = m.group("ts").split(" ", 1)  # glog's "731" / "1203": month and day
        timestamp = f"{day[:-2].zfill(2)}-{day[-2:]} {clock}"  # vLLM's shape, to order in time
        rest = rest[m.end() :]
    elif rest.startswith("time=") and (m := _LOGFMT.match(rest)):
        level, timestamp, source = m.group("level"), m.group("ts"), m.group("src")
        msg = m.group("msg")
        if msg.startswith('"'):
            msg = msg[1:-1].replace('\\"', '"')
        rest = f"{msg} {rest[m.end() :]}"
    else:
        m = _SGLANG_FORMAT.match(rest)
        if m:
            timestamp = m.group("ts")
            ranks = m.group("ranks").strip()
            if ranks and process is None:
                process = ranks
            rest = rest[m.end() :]
            inner = _LEVEL_AFTER_BRACKET.match(rest)
            if inner:
                level, source = inner.group("level"), inner.group("src")
                rest = rest[inner.end() :]
        else:
            m = _ISO_PREFIX.match(rest)
            if m:
                timestamp, level = m.group("ts"), m.group("level")
                if level is None and m.end() < len(rest):
                    # a bare stamp before the line (`docker logs -t`, CI runners): the line is
                    # read as printed, whatever its format (torch's rank and glog prefixes, a
                    # compiler's "file:line:" included), and keeps the outer stamp, so that
                    # every line of the log carries one clock
                    inner_line = parse_line(rest[m.end() :])
                    return LogLine(
                        text=text,
                        process=process or inner_line.process,
                        pid=pid if process else inner_line.pid,
                        level=inner_line.level,
                        timestamp=timestamp,
                        source=inner_line.source,
                        message=inner_line.message,
                    )
                if level and _VLLM_FORMAT.match(rest, m.start("level")):
                    # the level word opens a vLLM-format line: let that format take it whole
                    rest, level = rest[m.start("level") :], None
                else:
                    rest = rest[m.end() :]
                # a vLLM line may follow a docker timestamp
                inner = _PROCESS.match(rest)
                if inner and process is None:
                    process, pid = inner.group("process"), int(inner.group("pid"))
                    rest = rest[inner.end() :]
                inner = _VLLM_FORMAT.match(rest)
                if inner:
                    level, source = inner.group("level"), inner.group("src")
                    rest = rest[inner.end() :]
                inner = _SGLANG_FORMAT.match(rest)  # a launcher's logger around SGLang's lines
                if inner:
                    # the outer stamp is kept: every line of the log then carries one clock
                    # (`docker logs -t` stamps in UTC, SGLang in local time, and lines without
                    # SGLang's own stamp carry only the outer one)
                    process = process or inner.group("ranks").strip() or None
                    rest = rest[inner.end() :]
                    after = _LEVEL_AFTER_BRACKET.match(rest) if level is None else None
                    if after:  # a script's own logging format inside (see _LEVEL_AFTER_BRACKET)
                        level, source = after.group("level"), after.group("src")
                        rest = rest[after.end() :]
            else:
                m = _UVICORN.match(rest)
                if m:
                    level = m.group("level") or m.group("blevel")
                    rest = rest[m.end() :]
    if source is None and level is None:
        m = _LLAMACPP.match(rest)
        if m and not rest.startswith(("http:", "https:")):
            source = m.group("func")
            if m.group("tag"):
                source = f"{m.group('tag')} {source}"
    if level is not None:
        level = _LEVEL_WORDS.get(level, level)
    return LogLine(
        text=text,
        process=process,
        pid=pid,
        level=level,
        timestamp=timestamp,
        source=source,
        message=rest.strip(),
    )
