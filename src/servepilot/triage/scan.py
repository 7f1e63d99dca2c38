"""Stream a log file in large binary chunks and hand out only the lines worth parsing.

Parsing every line of a 1 GB log with regular expressions runs at ~20 MB/s in CPython; one
`bytes.find` per needle runs at 1-2 GB/s (measured on the 2-core bench machine), and so
does `bytes.count(b"\\n")` for line numbers. So the scanner looks for a handful of literal
needles per chunk and parses only the lines that hold one. After a `Traceback` line it
parses every line for a while (`DENSE_WINDOW` bytes), because the frames of a traceback
carry none of the needles.

Each needle costs one pass over the file, so the set is kept small: one pass for errors
of every spelling (`rror`: Error, error, OSError, "CUDA error"...), one for `failed`, one
for tracebacks, and the start-up banners and readiness lines of the log's engine.
`tests/triage/test_signatures.py` checks that every signature example carries a needle.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

CHUNK_BYTES = 8 << 20  # 8 MiB: large enough that per-chunk Python overhead is noise
MAX_LINE_BYTES = 1 << 20  # a "line" longer than this (binary garbage) is cut, never buffered whole
DENSE_WINDOW = 256 << 10  # bytes parsed line by line after a Traceback: 8 interleaved tracebacks fit

TRACEBACK = b"Traceback"
ERROR_NEEDLES: tuple[bytes, ...] = (b"rror", b"ailed", TRACEBACK)

# Start-up banners and readiness lines per engine (the texts are in triage/markers.py).
ENGINE_NEEDLES: dict[str, tuple[bytes, ...]] = {
    "vllm": (b"LLM", b"startup complete"),
    "sglang": (b"server_args", b"startup complete", b"fired up"),
    "llama.cpp": (b"build", b"listening", b"startup complete"),
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


def _line_bounds(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    start = buf.rfind(b"\n", 0, pos) + 1
    stop = buf.find(b"\n", pos, end)
    return start, (end if stop == -1 else stop)


def _candidate_starts(buf: bytes, end: int, needles: tuple[bytes, ...], dense_from: int):
    """Line starts holding a needle, and the Traceback line starts that open dense windows."""
    starts: set[int] = set()
    tracebacks: list[int] = []
    for needle in needles:
        pos = buf.find(needle, 0, end)
        while pos != -1:
            start, stop = _line_bounds(buf, pos, end)
            starts.add(start)
            if needle is TRACEBACK:
                tracebacks.append(start)
            pos = buf.find(needle, stop, end)
    # Dense windows: every line from each Traceback line on, for DENSE_WINDOW bytes.
    windows = [(0, dense_from)] if dense_from > 0 else []
    windows += [(s, s + DENSE_WINDOW) for s in sorted(tracebacks)]
    for lo, hi in _merge(windows):
        pos, stop = lo, min(hi, end)
        while pos < stop:
            starts.add(pos)
            nl = buf.find(b"\n", pos, end)
            pos = end if nl == -1 else nl + 1
    carry_dense = max((hi for _, hi in windows), default=0) - end
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
) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, decoded line) for candidate lines; all lines if needles is None.

    Bytes that are not UTF-8 become U+FFFD (errors="replace"), so binary garbage in a log
    never stops the scan.
    """
    carry = b""
    line_no = 1  # number of the first line in the current buffer
    dense_carry = 0
    while True:
        data = stream.read(chunk_bytes)
        buf = carry + data if carry else data
        if not buf:
            break
        stats.bytes += len(data)
        if data:
            end = buf.rfind(b"\n") + 1
            if end == 0:
                if len(buf) < MAX_LINE_BYTES:
                    carry = buf
                    continue
                end = len(buf)  # one endless line: cut it here
        else:
            end = len(buf)  # last line without a newline
        if needles is None:
            starts = _all_starts(buf, end)
        else:
            starts, dense_carry = _candidate_starts(buf, end, needles, dense_carry)
        prev = 0
        for start in starts:
            line_no += buf.count(b"\n", prev, start)
            stop = buf.find(b"\n", start, end)
            stop = end if stop == -1 else stop
            stats.candidates += 1
            yield line_no, buf[start:stop].decode("utf-8", errors="replace")
            prev = start
        line_no += buf.count(b"\n", prev, end)
        if end == len(buf) and not buf.endswith(b"\n"):
            line_no += 1  # the cut (or final) line without a newline still counts
        carry = buf[end:]
        if not data:
            break
    stats.lines = line_no - 1


def _all_starts(buf: bytes, end: int) -> list[int]:
    starts = []
    pos = 0
    while pos < end:
        starts.append(pos)
        nl = buf.find(b"\n", pos, end)
        pos = end if nl == -1 else nl + 1
    return starts
