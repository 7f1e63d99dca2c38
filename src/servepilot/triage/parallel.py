"""Scan a big log on several cores: one byte range per process, results merged in order.

The needle passes are CPU-bound and `bytes.find` holds the GIL, so threads do not help;
processes do (two cores: 1.8x on the 1 GB bench log). Ranges end on line boundaries. A
traceback window that runs past a range's end is finished by the same worker, line by line,
and the parent merges by absolute line number, so a line seen by two workers counts once.
Workers are forked when this process has a single thread (cheap: ~10 ms), and spawned
otherwise (~0.25 s of CPU each, but safe: triage also runs inside the launch supervisor,
which may have threads, and forking a threaded process can deadlock).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_all_start_methods, get_context

from servepilot.triage.scan import MAX_LINE_BYTES, ScanStats, scan_lines

PARALLEL_MIN_BYTES = 256 << 20  # below this, starting processes costs more than it saves
RANGE_MIN_BYTES = 128 << 20
MAX_CANDIDATES_PER_RANGE = 200_000  # beyond this the streaming scan keeps memory flat instead


class _RangeReader:
    """A binary stream limited to [start, stop) of a file, with absolute tell()."""

    def __init__(self, f, start: int, stop: int):
        self._f, self._stop = f, stop
        f.seek(start)

    def readinto(self, view) -> int:
        left = self._stop - self._f.tell()
        if left <= 0:
            return 0
        return self._f.readinto(view[: min(len(view), left)])

    def tell(self) -> int:
        return self._f.tell()


def _scan_range(path: str, start: int, stop: int, needles, tail_from: int):
    """Worker: (lines in range, candidates as (relative line, text)) or None when too many."""
    stats = ScanStats()
    out: list[tuple[int, str]] = []
    with open(path, "rb") as f:
        for item in scan_lines(_RangeReader(f, start, stop), needles, stats, tail_from=tail_from):
            out.append(item)
            if len(out) > MAX_CANDIDATES_PER_RANGE:
                return None
        if stats.dense_carry and stop < tail_from:
            # finish a traceback window that crosses into the next range
            extra = ScanStats()
            for n, text in scan_lines(_RangeReader(f, stop, stop + stats.dense_carry), None, extra, tail_from=stop):
                out.append((stats.lines + n, text))
    return stats.lines, out


def _context():
    single_threaded = threading.active_count() == 1
    return get_context("fork" if single_threaded and "fork" in get_all_start_methods() else "spawn")


def _split(path: str, size: int, parts: int) -> list[int]:
    bounds = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            f.seek(size * i // parts)
            f.readline(MAX_LINE_BYTES)
            bounds.append(max(bounds[-1], f.tell()))
    bounds.append(size)
    return bounds


def worker_count(size: int) -> int:
    """How many processes to scan a file of this size with (1: do not bother)."""
    if size < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, 8, size // RANGE_MIN_BYTES))


def scan_file_parallel(path: str, size: int, needles, tail_from: int, workers: int):
    """(total lines, candidate lines in order), or None: then the caller streams the file itself.

    None when a range had too many candidates, or when worker processes cannot run here (a
    script without an `if __name__ == "__main__"` guard, no semaphores in a sandbox).
    """
    bounds = _split(path, size, workers)
    ranges = [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]
    try:
        with ProcessPoolExecutor(len(ranges), mp_context=_context()) as pool:
            futures = [pool.submit(_scan_range, path, lo, hi, needles, tail_from) for lo, hi in ranges]
            results = [fut.result() for fut in futures]
    except (BrokenProcessPool, OSError, RuntimeError):
        return None
    if any(r is None for r in results):
        return None
    # keyed by (line, text): a line seen by two workers counts once, while the windows of one
    # overlong line (scan.long_line_windows) share a number and all stay, in their order
    merged: dict[tuple[int, str], None] = {}
    first_line = 0
    for lines, items in results:
        for n, text in items:
            merged.setdefault((first_line + n, text))
        first_line += lines
    return first_line, sorted(merged, key=lambda item: item[0])
