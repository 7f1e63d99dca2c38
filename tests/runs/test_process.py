import os
import sys
import time

import psutil
import pytest
from patience import PATIENCE_S

from servepilot.errors import BadInput
from servepilot.runs import process, tree

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _spawn(tmp_path, argv):
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        return process.spawn(argv, env=os.environ, cwd=tmp_path, log_fd=fd)
    finally:
        os.close(fd)


def _reap(proc):
    try:
        proc.wait(PATIENCE_S)
    except Exception:
        proc.kill()
        proc.wait()


def test_engine_leads_its_own_session_and_group(tmp_path):
    proc, ident = _spawn(tmp_path, SLEEPER)
    try:
        assert os.getpgid(proc.pid) == proc.pid == ident.pgid
        assert os.getsid(proc.pid) == proc.pid
        assert os.getpgid(proc.pid) != os.getpgid(0)
        assert process.is_same_process(ident.pid, ident.start_time)
        assert not process.is_same_process(ident.pid, ident.start_time + 1.0)
    finally:
        proc.kill()
        _reap(proc)
    assert not process.is_same_process(ident.pid, ident.start_time)  # reaped


def test_stop_refuses_a_recycled_pid(tmp_path):
    proc, ident = _spawn(tmp_path, SLEEPER)
    try:
        # The recorded run started at another time: this pid is someone else now.
        recycled = process.ProcessIdentity(ident.pid, ident.start_time - 3600, ident.pgid)
        with pytest.raises(process.NotOurProcess, match="another process"):
            tree.stop_tree(recycled, run_id=None, run_dir=None, grace_s=0.1)
        assert proc.poll() is None  # untouched
    finally:
        proc.kill()
        _reap(proc)


def test_stop_refuses_a_pid_in_a_foreign_group():
    # This test process is not a group leader of ours: same pid and start time, wrong group.
    me = psutil.Process()
    ident = process.ProcessIdentity(me.pid, me.create_time(), pgid=me.pid + 1_000_000)
    with pytest.raises(process.NotOurProcess, match="process group"):
        tree.stop_tree(ident, run_id=None, run_dir=None, grace_s=0.1)


def test_stop_terminates_the_whole_group(tmp_path):
    code = ("import subprocess,sys,time; "
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(600)']); time.sleep(600)")
    proc, ident = _spawn(tmp_path, [sys.executable, "-c", code])
    deadline = time.monotonic() + PATIENCE_S
    while len(process.group_members(ident.pgid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(process.group_members(ident.pgid)) == 2
    result = tree.stop_tree(ident, run_id=None, run_dir=None, grace_s=5)
    _reap(proc)
    assert result.signalled and not result.killed
    assert process.group_members(ident.pgid) == []


def test_stop_escalates_to_sigkill_after_the_grace(tmp_path):
    code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True); time.sleep(600)"
    proc, ident = _spawn(tmp_path, [sys.executable, "-c", code])
    deadline = time.monotonic() + PATIENCE_S
    while "ok" not in (tmp_path / "log").read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    t0 = time.monotonic()
    result = tree.stop_tree(ident, run_id=None, run_dir=None, grace_s=0.5)
    _reap(proc)
    assert result.killed and result.survivors == ()
    assert time.monotonic() - t0 >= 0.5
    assert proc.returncode == -9


def test_stopping_a_finished_run_signals_nothing(tmp_path):
    proc, ident = _spawn(tmp_path, [sys.executable, "-c", "pass"])
    _reap(proc)
    result = tree.stop_tree(ident, run_id=None, run_dir=None, grace_s=0.1)
    assert not result.signalled


def test_missing_program_is_bad_input(tmp_path):
    from servepilot.errors import BadInput

    with pytest.raises(BadInput, match="not found"):
        _spawn(tmp_path, ["/nonexistent/engine-binary"])


def test_a_group_made_by_job_control_in_another_session_is_not_ours(tmp_path):
    # The recorded leader is gone and its number now names a process group that some shell
    # made with setpgid (bash job control), in that shell's session: servepilot's engines
    # always lead their own session, so that group cannot be the run's.
    code = ("import subprocess,sys,time\n"
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(600)'])\n")
    leader = __import__("subprocess").Popen([sys.executable, "-c", code], process_group=0)
    leader.wait(PATIENCE_S)
    deadline = time.monotonic() + PATIENCE_S
    while not process.group_members(leader.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    members = process.group_members(leader.pid)
    assert members and os.getsid(members[0].pid) == os.getsid(0)
    ident = process.ProcessIdentity(pid=leader.pid, start_time=time.time() - 60, pgid=leader.pid)
    try:
        with pytest.raises(process.NotOurProcess, match="session"):
            tree.stop_tree(ident, run_id=None, run_dir=None, grace_s=1)
        assert process.group_members(leader.pid)  # not signalled
    finally:
        for p in members:
            p.kill()
            p.wait(PATIENCE_S)


def test_a_group_we_may_not_signal_is_a_typed_error(tmp_path, monkeypatch):
    # An engine started by another user (sudo servepilot launch, then stop as oneself):
    # killpg raises PermissionError, which escaped as a traceback.
    proc, ident = _spawn(tmp_path, SLEEPER)
    try:
        def denied(pgid, sig):
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(process.os, "killpg", denied)
        with pytest.raises(BadInput, match="not permitted"):
            tree.stop_tree(ident, run_id=None, run_dir=None, grace_s=1)
    finally:
        monkeypatch.undo()
        proc.kill()
        _reap(proc)
