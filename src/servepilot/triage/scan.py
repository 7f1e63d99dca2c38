"""Stream a log file in large binary chunks and hand out only the lines worth parsing.

Parsing every line of a 1 GB log with regular expressions runs at ~20 MB/s in CPython; one
`bytes.find` per needle runs at 1-2 GB/s (measured on the 2-core bench machine), and so
does `bytes.count(b"\\n")` for line numbers. So the scanner looks for a handful of literal
needles per chunk and parses only the lines that hold one. After a `Traceback` line it
parses every line for a while (`DENSE_WINDOW` bytes), because the frames of a traceback
carry none of the needles.

Each needle costs one pass over the file, so the set is kept small: one pass for errors
of every spelling (`rror`: Error, error, OSError, "CUDA error"...), one for tracebacks,
and per engine `failed` where the engine prints failures without an exception, and its
start-up banners and readiness lines.
`tests/triage/test_signatures.py` checks that every signature example carries a needle.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

CHUNK_BYTES = 8 << 20  # 8 MiB: large enough that per-chunk Python overhead is noise
MAX_LINE_BYTES = 1 << 20  # a "line" longer than this (binary garbage) is cut, never buffered whole
DENSE_WINDOW = 256 << 10  # bytes parsed line by line after a Traceback: 8 interleaved tracebacks fit
# The end of a log is parsed line by line too: a failed launch ends with its error, and there
# every message counts, needle or not (a NCCL WARN, llama.cpp's "couldn't bind").
DENSE_TAIL = 256 << 10  # ~1,000 lines: eight workers' tracebacks and the echoes after them
# A line longer than this is not parsed whole: a captured progress bar or a JSON blob can be
# one 50 MB "line", and regexes over it take minutes and its excerpt fills the screen (issue
# 17: 198 s and 8.4 MB of output). Only windows around the words an error is made of are
# parsed, each as wide as a long real message, at most LONG_LINE_WINDOWS per piece.
LONG_LINE_BYTES = 16 << 10
WINDOW_BYTES = 2 << 10
LONG_LINE_WINDOWS = 12
# Strongest first: an exception line beats a bare "error" word, so a real OOM in the middle
# of a line full of "Error" words still gets a window.
WINDOW_NEEDLES: tuple[bytes, ...] = (
    b"Error:", b"Exception:", b"out of memory", b"Traceback", b"FATAL", b"failed", b"rror",
)

# The longer the needle, the faster bytes.find skips (on the 314 MB bench log: "Traceback"
# 126 ms, "Traceback (most" 84 ms; "LLM" 223 ms, "vLLM API server" 94 ms).
TRACEBACK = b"Traceback (most"
ERROR_NEEDLES: tuple[bytes, ...] = (b"rror", TRACEBACK)

# Per engine: the failure words beyond "rror", then start-up banners and readiness lines
# (the texts are in triage/markers.py).
ENGINE_NEEDLES: dict[str, tuple[bytes, ...]] = {
    # vLLM raises every failure as a Python exception ("...Error: ...", or a traceback), so
    # "failed" adds nothing there. "vLLM API server" finds the API server's banner and its
    # readiness line "Starting vLLM API server" (which saves a pass for uvicorn's
    # "Application startup complete"). The engine core's own banner ("Initializing a V1 LLM
    # engine") gets no pass of its own in files over 4 MB (smaller ones are parsed whole): a
    # second serve launch prints the API server banner too, and an "LLM" pass cost more than
    # the error passes together (see TRACEBACK). An offline LLM() relaunch mid-file is seen
    # only through its workers' new pids on error lines.
    "vllm": (b"vLLM API server",),
    # SGLang: "Capture cuda graph failed"; llama.cpp: "failed to load model", "cudaMalloc failed";
    # "NOT connected": Gloo's report of a rank it could not reach, the only line of that stall;
    # "allowed length": an over-long input's refusal (logged with no level), read against the
    # scheduler's "max_total_num_tokens=..., context_len=..." line (signatures.sglang_input_limit)
    "sglang": (b"ailed", b"server_args", b"startup complete", b"fired up", b"NOT connected",
               b"allowed length", b"max_total_num_tokens="),
    # "runner started": ollama's readiness line for its llama.cpp runner ("llama runner started
    # in N seconds", engines/llamacpp/logs.py READY)
    "llama.cpp": (b"ailed", b"build", b"listening", b"startup complete", b"runner started"),
}


def needles_for(engine: str | None) -> tuple[bytes, ...]:
    """The needle set for one engine, or for all engines when it is not known."""
    if engine in ENGINE_NEEDLES:
        extra = ENGINE_NEEDLES[engine]
    else:
        extra = tuple(dict.fromkeys(n for ns in ENGINE_NEEDLES.values() for n in ns))
    return ERROR_NEEDLES + extra


@dataclass
class ScanStats:
    """Counts filled in while scanning; read them after the iterator is exhausted."""

    lines: int = 0
    bytes: int = 0
    candidates: int = 0
    dense_carry: int = 0  # bytes of an open traceback window that run past the end of the stream


def _line_bounds(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    start = buf.rfind(b"\n", 0, pos) + 1
    stop = buf.find(b"\n", pos, end)
    return start, (end if stop == -1 else stop)


def _candidate_starts(buf, end: int, needles: tuple[bytes, ...], dense_from: int, tail_at: int):
    """Line starts holding a needle, and the Traceback line starts that open dense windows.

    `dense_from`: a window carried over from the previous chunk ends here; `tail_at`: every
    line from this buffer offset on is a candidate (the log's tail).
    """
    starts: set[int] = set()
    tracebacks: list[int] = []
    for needle in needles:
        pos = buf.find(needle, 0, end)
        while pos != -1:
            start, stop = _line_bounds(buf, pos, end)
            starts.add(start)
            if needle == TRACEBACK:  # not `is`: needles may arrive pickled in a worker
                tracebacks.append(start)
            pos = buf.find(needle, stop, end)
    # Dense windows: every line from each Traceback line on, for DENSE_WINDOW bytes.
    windows = [(0, dense_from)] if dense_from > 0 else []
    windows += [(s, s + DENSE_WINDOW) for s in sorted(tracebacks)]
    if tail_at < end:
        windows.append((buf.rfind(b"\n", 0, max(tail_at, 0)) + 1, end))
    for lo, hi in _merge(windows):
        pos, stop = lo, min(hi, end)
        while pos < stop:
            starts.add(pos)
            nl = buf.find(b"\n", pos, end)
            pos = end if nl == -1 else nl + 1
    carry_dense = max((hi for _, hi in windows if hi <= end + DENSE_WINDOW), default=0) - end
    return sorted(starts), max(carry_dense, 0)


def _merge(windows):
    merged: list[list[int]] = []
    for lo, hi in sorted(windows):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def scan_lines(
    stream: BinaryIO,
    needles: tuple[bytes, ...] | None,
    stats: ScanStats,
    chunk_bytes: int = CHUNK_BYTES,
    tail_from: int | None = None,
) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, decoded line) for candidate lines; all lines if needles is None.

    `tail_from`: the byte offset from which every line is yielded (default: the last
    DENSE_TAIL bytes of a seekable stream).

    Bytes that are not UTF-8 become U+FFFD (errors="replace"), so binary garbage in a log
    never stops the scan.
    """
    line_no = 1  # number of the first line in the current buffer
    dense_carry = 0
    # One buffer for the whole scan: the unfinished last line moves to its front and the next
    # chunk is read in behind it, so no chunk is ever copied (a copy costs ~0.2 s per GB).
    buf = bytearray(chunk_bytes + MAX_LINE_BYTES)
    view = memoryview(buf)
    kept = 0
    if tail_from is None:
        here = stream.tell()
        tail_from = max(0, stream.seek(0, 2) - DENSE_TAIL)
        stream.seek(here)
    consumed = stream.tell()  # absolute offset just past what has been read
    cut_open = False  # the buffer's last piece ended without a newline (a cut endless line)
    while True:
        got = stream.readinto(view[kept : kept + chunk_bytes])
        buf_offset = consumed - kept  # absolute offset of buf[0]
        consumed += got
        data = got > 0
        size = kept + got
        if size == 0:
            if cut_open:
                line_no += 1
            break
        stats.bytes += got
        if data:
            end = buf.rfind(b"\n", 0, size) + 1
            if end == 0:
                if size < MAX_LINE_BYTES:
                    kept = size
                    continue
                end = size  # one endless line: cut it here
        else:
            end = size  # last line without a newline
        if needles is None:
            starts = _all_starts(buf, end)
        else:
            starts, dense_carry = _candidate_starts(buf, end, needles, dense_carry, tail_from - buf_offset)
        prev = 0
        for start in starts:
            line_no += buf.count(b"\n", prev, start)
            stop = buf.find(b"\n", start, end)
            stop = end if stop == -1 else stop
            if stop - start > LONG_LINE_BYTES:
                for lo, hi in long_line_windows(buf, start, stop):
                    stats.candidates += 1
                    yield line_no, buf[lo:hi].decode("utf-8", errors="replace")
            else:
                stats.candidates += 1
                yield line_no, buf[start:stop].decode("utf-8", errors="replace")
            prev = start
        line_no += buf.count(b"\n", prev, end)
        # A piece cut from an endless line is not a line of its own: the line is counted once,
        # at its newline or at the end of the stream (a one-line file is "1 line").
        cut_open = end > 0 and buf[end - 1] != 0x0A
        if cut_open and not data:
            line_no += 1
            cut_open = False
        kept = size - end
        buf[:kept] = buf[end:size]
        if not data:
            break
    stats.lines = line_no - 1
    stats.dense_carry = dense_carry


def long_line_windows(buf, start: int, stop: int) -> list[tuple[int, int]]:
    """Byte ranges of an overlong line worth parsing: windows around error words, and its end.

    Each window starts after the last `\r` before the hit (a progress bar's redraw) or
    WINDOW_BYTES/2 before it, and ends at the next `\r` or `\n` or WINDOW_BYTES/2 after it.
    The line's last window is kept too: a terminal shows what follows the last `\r`.
    """
    half = WINDOW_BYTES // 2
    hits: list[int] = []
    for needle in WINDOW_NEEDLES:
        pos = buf.find(needle, start, stop)
        while pos != -1 and len(hits) < LONG_LINE_WINDOWS - 1:
            hits.append(pos)
            pos = buf.find(needle, pos + half, stop)
        if len(hits) >= LONG_LINE_WINDOWS - 1:
            break
    windows = []
    for pos in sorted(set(hits)):
        lo = max(start, pos - half)
        cr = buf.rfind(b"\r", lo, pos)
        lo = cr + 1 if cr != -1 else lo
        hi = min(stop, pos + half)
        cr = buf.find(b"\r", pos, hi)
        windows.append((lo, cr if cr != -1 else hi))
    windows.append((max(start, stop - WINDOW_BYTES), stop))
    return [tuple(w) for w in _merge(windows)]


def _all_starts(buf: bytes, end: int) -> list[int]:
    starts = []
    pos = 0
    while pos < end:
        starts.append(pos)
        nl = buf.find(b"\n", pos, end)
        pos = end if nl == -1 else nl + 1
    return starts
