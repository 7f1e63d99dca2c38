"""Run directories: one per attempt, never reused, under <state dir>/runs/<run-id>.

The story's operator lost a launch to a log file reused from the attempt before; here the
directory is created with mkdir (fails if it exists) and the log with O_EXCL, so no
attempt can ever write into another's files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from servepilot import settings
from servepilot.errors import BadInput

LOG_NAME = "server.log"
RECORD_NAME = "run.json"
COMMAND_NAME = "command.txt"

# A --name becomes part of a directory name: keep it to a portable, shell-safe alphabet.
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def runs_root() -> Path:
    return settings.state_dir() / "runs"


def check_name(name: str) -> str:
    if not _NAME_OK.match(name):
        raise BadInput(
            f"run name {name!r} is not usable",
            hint="use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


def new_run_id(name: str | None = None, now: float | None = None) -> str:
    """`[name-]YYYYmmdd-HHMMSS-xxxxxx`: sortable by time; 24 random bits against collisions."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    rid = f"{stamp}-{secrets.token_hex(3)}"
    return f"{check_name(name)}-{rid}" if name else rid


def create_run_dir(name: str | None = None, root: Path | None = None) -> tuple[str, Path]:
    """Make a fresh directory for one attempt; a clash (same second, same random) retries."""
    root = root or runs_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot make the runs directory ({exc.strerror})", path=root,
                       hint="set SERVEPILOT_HOME to a directory") from None
    for _ in range(20):
        run_id = new_run_id(name)
        path = root / run_id
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return run_id, path
    raise BadInput("could not create a fresh run directory after 20 tries", path=root)


def remove_empty_run_dir(run_dir: Path) -> None:
    """Undo create_run_dir after a failed first write (a full disk): remove what is in it
    (only servepilot's own files, just created) and the directory."""
    for child in run_dir.iterdir():
        with contextlib.suppress(OSError):
            child.unlink()
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def open_log_exclusive(run_dir: Path) -> int:
    """Create server.log and return a write fd; raises FileExistsError if it already exists."""
    return os.open(run_dir / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    """Write run.json atomically (a reader in another shell never sees half a file)."""
    # A temporary of its own per writer: the supervisor and a `stop` in another shell may
    # write at the same moment, and a shared name let one rename the other's file away.
    fd, tmp = tempfile.mkstemp(prefix=f".{RECORD_NAME}.", suffix=".tmp", dir=run_dir)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(record, indent=2, default=str) + "\n")
        os.replace(tmp, run_dir / RECORD_NAME)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_record(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / RECORD_NAME).read_text())
    except (OSError, ValueError):
        return None
