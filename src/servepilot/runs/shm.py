"""Engine leftovers in /dev/shm: find the ones no live process holds, remove on request.

A crashed vLLM or SGLang run leaves shared-memory segments (torch's psm_*, Python
multiprocessing's sem.mp-*, NCCL's nccl-*, vLLM's message-queue buffers) that fill the
64 MiB-default /dev/shm of a container until the next launch fails in `shm`. A file is a
leftover only when no process has it open (/proc/<pid>/fd) or mapped (/proc/<pid>/maps),
and no live process names it in its command line or environment (a process that reopens a
segment by name, shm_open(3) style, holds nothing between two uses). Every status carries
its reason in words.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

SHM_DIR = Path("/dev/shm")

# Name patterns, with who creates them.
PATTERNS = (
    "psm_*",  # torch.multiprocessing file_system sharing strategy (torch/csrc/.../libshm)
    "torch_*",  # torch shared-memory manager segments
    "sem.mp-*",  # CPython multiprocessing named semaphores (Lib/multiprocessing/synchronize.py)
    "nccl-*",  # NCCL shared-memory transport (src/transport/shm.cc)
    "vllm*",  # vLLM shared-memory message queues (vllm/distributed/device_communicators/shm_broadcast.py)
    "sglang*",
    "wnsm_*",  # Python multiprocessing.shared_memory default names (Lib/multiprocessing/shared_memory.py)
    "cuda.shm.*",  # CUDA IPC shared memory handles
)

# A file younger than this may belong to an engine that is starting and has not opened it
# yet (or between creating and mapping it); leave it for the next cleanup.
MIN_AGE_S = 60.0


@dataclass(frozen=True)
class ShmEntry:
    path: str
    size: int
    age_s: float
    holders: tuple[int, ...]  # pids that have it open or mapped
    status: str  # "leftover" | "in_use" | "named" | "too_new" | "unknown" (cannot see all processes)
    removed: bool = False
    reason: str = ""  # why it has this status, in words
    # (st_dev, st_ino, st_mtime_ns) as scanned: the file judged, not a namesake made since
    identity: tuple = field(default=(), metadata={"json": False})


def _scan(dir_: Path, names: tuple[str, ...] = ()) -> tuple[dict[str, set[int]], set[int], dict[str, set[int]]]:
    """path -> pids holding it (open fd or mapping) under `dir_`; the uids whose processes we
    could not inspect; and name (of `names`) -> pids whose command line or environment
    mention it."""
    prefix = str(dir_).rstrip("/") + "/"
    held: dict[str, set[int]] = {}
    blind_uids: set[int] = set()
    named: dict[str, set[int]] = {}
    wanted = [(n, n.encode()) for n in names]
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith(prefix):
                    held.setdefault(target.removesuffix(" (deleted)"), set()).add(pid)
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    idx = line.find(prefix)
                    if idx >= 0:
                        held.setdefault(line[idx:].rstrip("\n").removesuffix(" (deleted)"), set()).add(pid)
            if wanted:
                blob = _read(f"/proc/{pid}/cmdline") + b"\0" + _read(f"/proc/{pid}/environ")
                for name, raw in wanted:
                    if raw in blob:
                        named.setdefault(name, set()).add(pid)
        except PermissionError:
            try:
                blind_uids.add(os.stat(f"/proc/{pid}").st_uid)
            except OSError:
                pass
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited while we looked
    return held, blind_uids, named


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 20)
    except OSError:
        return b""


def _who(pids) -> str:
    import psutil

    parts = []
    for pid in sorted(pids)[:3]:
        try:
            parts.append(f"{pid} ({psutil.Process(pid).name()})")
        except psutil.Error:
            parts.append(str(pid))
    more = len(pids) - 3
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def scan(shm_dir: Path = SHM_DIR, patterns: tuple[str, ...] = PATTERNS, now: float | None = None) -> list[ShmEntry]:
    now = now if now is not None else time.time()
    if not shm_dir.is_dir():
        return []
    candidates = [e for e in sorted(os.scandir(shm_dir), key=lambda e: e.name)
                  if any(fnmatch.fnmatchcase(e.name, p) for p in patterns)]
    held, blind_uids, named = _scan(shm_dir, tuple(e.name for e in candidates))
    out = []
    for entry in candidates:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        holders = tuple(sorted(held.get(entry.path, ())))
        namers = named.get(entry.name, set())
        age = now - st.st_mtime
        if holders:
            status, reason = "in_use", f"open or mapped by pid {_who(holders)}"
        elif namers:
            status, reason = "named", (f"pid {_who(namers)} names it in its command line or environment "
                                       "and may reopen it")
        elif st.st_uid in blind_uids:
            status, reason = "unknown", (f"some processes of its owner {_owner(st.st_uid)} cannot be inspected "
                                         "here (no permission): whether they use it is unknown; run as that "
                                         "user or as root")
        elif age < MIN_AGE_S:
            status, reason = "too_new", (f"changed {age:.0f} s ago (under {MIN_AGE_S:.0f} s): an engine may be "
                                         "starting and about to open it")
        else:
            status, reason = "leftover", "no live process has it open or mapped, or names it"
        out.append(ShmEntry(entry.path, st.st_size, round(age, 1), holders, status, reason=reason,
                            identity=(st.st_dev, st.st_ino, st.st_mtime_ns)))
    return out


def remove_leftovers(entries: list[ShmEntry], shm_dir: Path = SHM_DIR) -> list[ShmEntry]:
    """Unlink the `leftover` entries, re-checking each just before (a process may have
    opened it since the scan). Returns the entries with `removed` set."""
    held, _, named = _scan(shm_dir, tuple(Path(e.path).name for e in entries if e.status == "leftover"))
    out = []
    for e in entries:
        if e.status == "leftover" and not held.get(e.path) and not named.get(Path(e.path).name) and _unchanged(e):
            try:
                os.unlink(e.path)
                e = replace(e, removed=True)
            except FileNotFoundError:
                pass
        out.append(e)
    return out


def _unchanged(e: ShmEntry) -> bool:
    """Still the very file the scan judged (same inode, not written since)."""
    try:
        st = os.stat(e.path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino, st.st_mtime_ns) == e.identity
