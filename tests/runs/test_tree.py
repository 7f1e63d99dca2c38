"""runs/tree.py: stopping a run's whole tree signals only processes of the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
from patience import PATIENCE_S

from servepilot.runs.process import ProcessIdentity
from servepilot.runs.tree import RUN_MARKER, stop_tree

_IGNORE_TERM = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)"
)


def _ready(proc: subprocess.Popen) -> None:
    assert proc.stdout.readline().strip() == "ready"


def test_a_gone_group_is_not_killed_by_number(tmp_path):
    """The leader and its group are gone; one escaped worker ignores SIGTERM. The SIGKILL
    that follows goes to that worker, never to whatever process group now has the number."""
    # A process group the run did not start, holding the number the run recorded as its own
    # (as when the kernel hands a freed pid to a new session leader).
    stranger = subprocess.Popen([sys.executable, "-c", _IGNORE_TERM], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
    worker = None
    try:
        _ready(stranger)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        # The run's engine started after the stranger (create times are on psutil's clock).
        started = psutil.Process(stranger.pid).create_time() + 0.02
        time.sleep(0.1)
        identity = ProcessIdentity(pid=gone.pid, start_time=started, pgid=stranger.pid)
        env = dict(os.environ, **{RUN_MARKER: "run-escaped"})
        worker = subprocess.Popen([sys.executable, "-c", _IGNORE_TERM], stdout=subprocess.PIPE,
                                  text=True, env=env, start_new_session=True)
        _ready(worker)
        result = stop_tree(identity, run_id="run-escaped", run_dir=tmp_path, grace_s=0.2)
        assert result.killed and worker.wait(timeout=PATIENCE_S) == -9
        assert stranger.poll() is None, "a process group servepilot did not start was killed"
    finally:
        for proc in (stranger, worker):
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                proc.stdout.close()
