"""Engine processes: start in their own session, identify, and stop only our own.

A pid alone does not identify a process: after it exits the kernel hands the number to
someone else. A run records the pid together with its start time (psutil create_time) and
the process group the engine leads; every later action checks both before signalling.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from servepilot.errors import BadInput

# create_time is boot time + start ticks / CLK_TCK (100 Hz on Linux): the same process reads
# back the same value, a different process differs by at least one tick (0.01 s) or more.
START_TIME_TOLERANCE_S = 0.005


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: float
    pgid: int


def spawn(argv: Sequence[str], *, env: Mapping[str,
                                               str], cwd: str | Path,
          log_fd: int) -> tuple[subprocess.Popen, ProcessIdentity]:
    """Start the engine as the leader of a new session and process group.

    stdout and stderr go straight to the run's log file (not through a pipe servepilot
    holds), so the engine keeps logging after a detached CLI exits. stdin is /dev/null: an
    engine must never wait on the operator's terminal.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
            close_fds=True,
        )
    except FileNotFoundError as exc:
        raise BadInput(f"cannot start {argv[0]!r}: not found on PATH",
                       hint="is the engine installed in this environment?") from exc
    except PermissionError as exc:
        raise BadInput(f"cannot start {argv[0]!r}: permission denied") from exc
    try:
        start = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        # It already exited (and is a zombie we have not reaped, so this is rare); the
        # start time is unknowable and no later verb will signal it.
        start = 0.0
    return proc, ProcessIdentity(pid=proc.pid, start_time=start, pgid=proc.pid)


def self_identity() -> ProcessIdentity:
    """This process (the supervisor) as an identity another `ps` can check."""
    me = psutil.Process()
    return ProcessIdentity(pid=me.pid, start_time=me.create_time(), pgid=os.getpgid(0))


def is_same_process(pid: int | None, start_time: float | None) -> bool:
    """True when `pid` is alive (not a zombie) and is the process that started at `start_time`."""
    if not isinstance(pid, int) or pid <= 0 or not start_time:
        return False
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - start_time) > START_TIME_TOLERANCE_S:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # it exists and its start time matched; we just cannot read its status


def group_members(pgid: int, not_before: float | None = None) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is `pgid`.

    `not_before`: skip processes created before this time (a group id outlives its leader,
    and none of our engine's processes can predate the engine).
    """
    members = []
    for p in psutil.process_iter(["pid", "create_time", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if not_before is not None and p.info["create_time"] + START_TIME_TOLERANCE_S < not_before:
                continue
            if os.getpgid(p.pid) == pgid:
                members.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


class NotOurProcess(BadInput):
    """The recorded pid or group now belongs to something servepilot did not start."""


@dataclass(frozen=True)
class StopResult:
    signalled: bool
    killed: bool  # SIGKILL was needed after the grace period
    survivors: tuple[int, ...]  # pids still in the group afterwards (should be empty)
    detail: str


def verify_ours(identity: ProcessIdentity) -> list[psutil.Process]:
    """The live members of the run's group, after checking that they are ours.

    Refuses (NotOurProcess) when the pid is alive but started at another time (recycled),
    or when it now leads or belongs to a different process group.
    """
    if not identity.start_time:
        raise NotOurProcess(f"the start time of pid {identity.pid} was never recorded; not signalling it")
    try:
        p = psutil.Process(identity.pid)
        alive = p.status() != psutil.STATUS_ZOMBIE
        started = p.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        alive, started = False, None
    if alive and started is not None:
        if abs(started - identity.start_time) > START_TIME_TOLERANCE_S:
            raise NotOurProcess(
                f"pid {identity.pid} now belongs to another process (started "
                f"{time.strftime('%H:%M:%S', time.localtime(started))}, the run's started "
                f"{time.strftime('%H:%M:%S', time.localtime(identity.start_time))}); not signalling it"
            )
        try:
            pgid = os.getpgid(identity.pid)
        except ProcessLookupError:
            pgid = None
        if pgid is not None and pgid != identity.pgid:
            raise NotOurProcess(
                f"pid {identity.pid} is in process group {pgid}, not the run's group {identity.pgid}; not signalling it"
            )
    # The leader may be gone while its workers live on (orphaned vLLM workers): the group id
    # cannot be reused while any member exists, and members started before the engine are
    # not ours.
    members = group_members(identity.pgid, not_before=identity.start_time)
    # spawn() starts every engine as a session leader, so the run's group lives in the
    # session of the same number. A group of that number in another session was made by
    # someone else (a shell's job control, setpgid) after the run's number was recycled.
    for p in members:
        try:
            sid = os.getsid(p.pid)
        except ProcessLookupError:
            continue
        if sid != identity.pgid:
            raise NotOurProcess(
                f"process group {identity.pgid} now belongs to session {sid}, not the run's session "
                f"{identity.pgid} (its number was reused); not signalling it"
            )
    return members


def group_alive(identity: ProcessIdentity) -> bool:
    """True while the run's leader, or any process of its group, is alive.

    A launcher that backgrounds the server and returns (`engine & exit 0`) leaves the
    group serving without its leader.
    """
    if is_same_process(identity.pid, identity.start_time):
        return True
    if not identity.start_time:
        return False
    try:
        return bool(verify_ours(identity))
    except NotOurProcess:
        return False


def listening_ports(identity: ProcessIdentity) -> set[int] | None:
    """TCP ports that the engine's process tree listens on; None when that cannot be read
    (an engine running as another user), so the caller knows it is not an empty answer."""
    ports: set[int] = set()
    try:
        root = psutil.Process(identity.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.AccessDenied:
        return None
    except psutil.Error:
        tree = []
    if not tree and identity.start_time:
        # The leader is gone; its group may live on and serve (see group_alive).
        try:
            tree = verify_ours(identity)
        except NotOurProcess:
            return ports
    denied = 0
    for p in tree:
        try:
            for c in p.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr:
                    ports.add(c.laddr.port)
        except psutil.AccessDenied:
            denied += 1
        except psutil.Error:
            continue
    return None if denied and not ports else ports
