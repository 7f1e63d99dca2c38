"""Helpers of the fault-injection suite: the CLI as its own process, waits on conditions,
and the orphan check (every process that carries a run's marker, wherever it went)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
from patience import PATIENCE_S

from servepilot.runs.tree import RUN_MARKER

CLI = [sys.executable, "-c", "from servepilot.cli.main import run; run()"]
SAFETY_CAP_S = PATIENCE_S  # a cap on waits that end on their condition (tests/patience.py)


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=SAFETY_CAP_S, **kw)


def spawn_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(condition, what: str, cap_s: float = SAFETY_CAP_S, poll_s: float = 0.05):
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"still waiting for {what} after {cap_s:g} s")


def ps() -> list[dict]:
    result = cli("ps", "--all", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["runs"]


def run_row(run_id: str) -> dict | None:
    return next((r for r in ps() if r["run_id"] == run_id), None)


def marked(run_ids) -> list[int]:
    """Live processes carrying one of these runs' marker in their environment."""
    wanted = {f"{RUN_MARKER}={rid}".encode() for rid in run_ids}
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as fh:
                env = set(fh.read().split(b"\0"))
            if env & wanted and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except (OSError, psutil.Error):
            continue
    return found


def alive(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            continue
    return out


def pids_in(path: Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split()]
    except OSError:
        return []


def assert_no_orphans(run_ids, pid_file: Path | None = None) -> None:
    """Nothing of these runs is left: no marked process and no pid the engine wrote down.
    The kernel takes a moment to tear down a killed process, hence the wait."""
    def clean():
        return not marked(run_ids) and not alive(pids_in(pid_file) if pid_file else [])

    wait_for(clean, f"the processes of {list(run_ids)} to be gone")


def kill_everything(run_ids, pid_file: Path | None = None) -> None:
    """Cleanup of last resort for a failed test: SIGKILL whatever is left, by pid."""
    for pid in set(marked(run_ids)) | set(alive(pids_in(pid_file) if pid_file else [])):
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def record_ok(run_dir: str) -> dict:
    """run.json parses (never half-written) and names its run."""
    data = json.loads((Path(run_dir) / "run.json").read_text())
    assert data["id"] and data["state"]
    return data
