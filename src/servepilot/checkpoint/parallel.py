"""Split header reading across two processes when the checkpoint is big enough to gain.

Parsing is CPU-bound JSON (the GIL rules out threads). For a 1T-parameter checkpoint the
index (25 MB) and the 119 headers (35 MB) make `servepilot inspect` take 0.74 s in one
process; a forked child that takes the index and a share of the shards brings it to 0.44 s
on two cores (bench/bench_inspect.py, best of 9, load average ~2).

The child is a plain os.fork() whose result comes back pickled through a pipe; it returns
values, never raises, and if anything about it fails the caller simply does the work itself.
Forking is only done where it is safe and cheap: Linux, at least two usable CPUs, and no
other thread alive in this process (a fork copies locks held by other threads).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

# Below this many shard files the serial path is as fast as the fork (measured: a fork and
# the pickled results cost ~5 ms; one shard's header of a big MoE parses in ~2-3 ms).
MIN_SHARDS = 16


def can_fork() -> bool:
    import threading  # here and pickle below: `check` on a small checkpoint never forks

    if sys.platform != "linux" or threading.active_count() != 1:
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


class Forked:
    """A call running in a forked child; `result()` returns its value or None if it failed."""

    def __init__(self, fn: Callable[[], Any]):
        import pickle  # before the fork, so the child does not import it again

        self.pid: int | None = None
        self.fd: int | None = None
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return
        if pid == 0:  # child: compute, send, leave without running any parent cleanup
            status = 0
            try:
                os.close(r)
                payload = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(w, "wb") as out:
                    out.write(payload)
            except BaseException:  # noqa: BLE001 - the parent falls back to doing the work
                status = 1
            finally:
                os._exit(status)
        os.close(w)
        self.pid, self.fd = pid, r

    def result(self) -> Any | None:
        if self.pid is None or self.fd is None:
            return None
        chunks = []
        with os.fdopen(self.fd, "rb") as f:
            while chunk := f.read(1 << 20):
                chunks.append(chunk)
        _, status = os.waitpid(self.pid, 0)
        if status != 0 or not chunks:
            return None
        import pickle

        try:
            return pickle.loads(b"".join(chunks))
        except Exception:  # noqa: BLE001 - a truncated payload: do the work in the parent
            return None
