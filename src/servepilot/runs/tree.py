"""The engine's whole process tree, including processes that left its process group.

`stop` signals the run's process group; a worker that called setsid() (a daemonising
launcher, a helper that double-forks) is outside it and kept holding GPU memory after a
"stopped". Three ways of seeing a run's processes, each safe against pid reuse because a
process is only taken when it started at or after the engine and its start time still
matches the one recorded:

- the process group the engine leads (what the kernel gives us for free);
- snapshots of the leader's descendants (psutil children(recursive)) taken while the run
  is supervised, written to `tree.json` in the run directory so a `stop` from another
  shell knows them too;
- a marker in the environment (`SERVEPILOT_RUN_ID`): every descendant inherits it unless
  it clears its environment, so even a double-forked daemon whose parent exited before
  any snapshot is found by reading /proc/PID/environ of this user's processes.

A cgroup v2 per run would be stronger still, but needs a delegated subtree that an
unprivileged user rarely has; these three work everywhere psutil does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from servepilot.errors import BadInput
from servepilot.runs.process import START_TIME_TOLERANCE_S, ProcessIdentity, StopResult, verify_ours

RUN_MARKER = "SERVEPILOT_RUN_ID"
TREE_NAME = "tree.json"


@dataclass(frozen=True)
class Member:
    """One process of the run: pid plus start time (a pid alone can be reused)."""

    pid: int
    start_time: float
    in_group: bool
    how: str  # "group" | "descendant" | "marker"


def _marker_of(pid: int) -> str | None:
    """The run id in the process's environment, or None (unreadable, absent)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read(1 << 20)  # an environment over 1 MiB is not one of our engines
    except OSError:
        return None
    key = RUN_MARKER.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode(errors="replace")
    return None


def _alive(pid: int, start_time: float) -> psutil.Process | None:
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - start_time) > START_TIME_TOLERANCE_S:
            return None
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except psutil.Error:
        return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def snapshot(identity: ProcessIdentity) -> list[tuple[int, float]]:
    """The leader's live descendants now, as (pid, start time)."""
    try:
        root = psutil.Process(identity.pid)
        if abs(root.create_time() - identity.start_time) > START_TIME_TOLERANCE_S:
            return []
        kids = root.children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in kids:
        with contextlib.suppress(psutil.Error):
            out.append((p.pid, p.create_time()))
    return out


class TreeLog:
    """Descendants seen so far, persisted beside the run's record."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / TREE_NAME
        self.seen: dict[int, float] = dict(read_seen(run_dir))

    def record(self, identity: ProcessIdentity) -> int:
        """Take one snapshot; returns how many new processes it found."""
        new = 0
        for pid, started in snapshot(identity):
            if started + START_TIME_TOLERANCE_S < identity.start_time:
                continue
            if self.seen.get(pid) != started:
                self.seen[pid] = started
                new += 1
        if new:
            self._write()
        return new

    def _write(self) -> None:
        data = {"descendants": [[pid, t] for pid, t in sorted(self.seen.items())]}
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{TREE_NAME}.", dir=self.path.parent)
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.replace(tmp, self.path)
        except OSError:
            # A full disk must not break supervision; the marker scan still finds them.
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)


def read_seen(run_dir: Path | str | None) -> list[tuple[int, float]]:
    if run_dir is None:
        return []
    try:
        data = json.loads((Path(run_dir) / TREE_NAME).read_text())
        return [(int(pid), float(t)) for pid, t in data.get("descendants", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def members(identity: ProcessIdentity, run_id: str | None, run_dir: Path | str | None = None,
            group: Iterable[psutil.Process] = ()) -> list[Member]:
    """Every live process of the run: its group, known descendants, marked processes."""
    found: dict[int, Member] = {}
    for p in group:
        with contextlib.suppress(psutil.Error):
            found[p.pid] = Member(p.pid, p.create_time(), True, "group")
    not_before = identity.start_time - START_TIME_TOLERANCE_S
    candidates = list(read_seen(run_dir)) + snapshot(identity)
    for pid, started in candidates:
        if pid in found or started < not_before:
            continue
        if _alive(pid, started) is not None:
            found[pid] = Member(pid, started, _pgid(pid) == identity.pgid, "descendant")
    if run_id:
        for m in marked(run_id, not_before, identity.pgid):
            found.setdefault(m.pid, m)
    return sorted(found.values(), key=lambda m: m.pid)


def marked(run_id: str, not_before: float, pgid: int | None = None) -> list[Member]:
    """Live processes started at or after `not_before` whose environment carries the run's
    marker. Alone, this finds an engine whose pid never reached the record (its supervisor
    was killed between starting it and writing the pid down)."""
    out = []
    me = os.getpid()
    for p in psutil.process_iter(["pid", "create_time"]):
        pid, started = p.info["pid"], p.info["create_time"] or 0
        if pid == me or started < not_before:
            continue
        if _marker_of(pid) == run_id and _alive(pid, started) is not None:
            out.append(Member(pid, started, pgid is not None and _pgid(pid) == pgid, "marker"))
    return out


def stop_marked(run_id: str, not_before: float, grace_s: float = 10.0, poll_s: float = 0.05) -> StopResult:
    """Stop a run known only by its marker (no pid on record): TERM, grace, KILL, report."""
    targets = marked(run_id, not_before)
    if not targets:
        return StopResult(False, False, (), "no process of the run is alive")
    signal_members(targets, signal.SIGTERM)
    left = wait_gone(targets, time.monotonic() + grace_s, poll_s)
    count = f"{len(targets)} process(es) found by the run's marker; its pid was never recorded"
    if not left:
        return StopResult(True, False, (), f"stopped with SIGTERM ({count})")
    signal_members(left, signal.SIGKILL)
    left = wait_gone(left, time.monotonic() + 5.0, poll_s)
    detail = f"SIGKILL after {grace_s:g} s grace ({count})"
    if left:
        detail += "; STILL ALIVE: " + "; ".join(describe(m) for m in left)
    return StopResult(True, True, tuple(m.pid for m in left), detail)


def escaped(all_members: Iterable[Member], pgid: int) -> list[Member]:
    return [m for m in all_members if _pgid(m.pid) != pgid]


def signal_members(targets: Iterable[Member], sig: int) -> None:
    """Signal each process individually, re-checking its start time first."""
    for m in targets:
        p = _alive(m.pid, m.start_time)
        if p is None:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            p.send_signal(sig)


def wait_gone(targets: list[Member], deadline: float, poll_s: float = 0.05) -> list[Member]:
    left = list(targets)
    while left and time.monotonic() < deadline:
        left = [m for m in left if _alive(m.pid, m.start_time) is not None]
        if left:
            time.sleep(poll_s)
    return [m for m in left if _alive(m.pid, m.start_time) is not None]


def describe(m: Member) -> str:
    try:
        name = " ".join(psutil.Process(m.pid).cmdline()[:3])[:80]
    except psutil.Error:
        name = "?"
    where = "in the run's group" if m.in_group else "outside the run's group"
    return f"pid {m.pid} ({name}; {where}, found by {m.how})"


def stop_tree(identity: ProcessIdentity, *, run_id: str | None, run_dir: Path | str | None,
              grace_s: float = 10.0, poll_s: float = 0.05) -> StopResult:
    """SIGTERM to the run's group and to each of its processes outside it, up to `grace_s`
    for them to go, then SIGKILL; the detail says what, if anything, is still alive.

    Raises NotOurProcess (from verify_ours) when the recorded leader's pid was reused.
    """
    group = verify_ours(identity)
    targets = members(identity, run_id, run_dir, group=group)
    if not targets:
        return StopResult(False, False, (), "no process of the run is alive")
    outside = escaped(targets, identity.pgid)
    try:
        if group:
            os.killpg(identity.pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        raise BadInput(
            f"not permitted to signal process group {identity.pgid} (it runs as another user)",
            hint="stop it as the user that launched it",
        ) from None
    signal_members(outside, signal.SIGTERM)
    count = f"{len(targets)} process(es)" + (f", {len(outside)} outside its group" if outside else "")
    left = wait_gone(targets, time.monotonic() + grace_s, poll_s)
    # Children forked after the snapshot (a worker spawning while being stopped) are
    # looked up once more before deciding that all is gone.
    late = [m for m in members(identity, run_id, run_dir) if m.pid not in {t.pid for t in targets}]
    if not left and not late:
        return StopResult(True, False, (), f"stopped with SIGTERM ({count})")
    left = left + late
    # The group id is only ours while a member of the run still holds it: once the group is
    # gone, the kernel may give the number to another session, so it is not signalled.
    if any(_pgid(m.pid) == identity.pgid for m in left):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(identity.pgid, signal.SIGKILL)
    signal_members(left, signal.SIGKILL)
    # SIGKILL cannot be caught; the kernel needs a moment to tear the processes down.
    left = wait_gone(left, time.monotonic() + 5.0, poll_s)
    detail = f"SIGKILL after {grace_s:g} s grace ({count})"
    if left:
        detail += "; STILL ALIVE: " + "; ".join(describe(m) for m in left)
    return StopResult(True, True, tuple(m.pid for m in left), detail)
