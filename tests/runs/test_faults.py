"""Fault injection for the run verbs, against a real fake-engine process.

Each scenario ends with the same three questions: is any process of the run left (its
group, its descendants, anything carrying its marker), is its record whole (history row
and run.json), and does `ps` say plainly what state it is in.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import psutil
import pytest
from patience import PATIENCE_S

from servepilot.runs import launch, manage, rundir, store

from .conftest import FAKE_ENGINE, free_port
from .faultkit import (
    alive,
    assert_no_orphans,
    cli,
    kill_everything,
    pids_in,
    ps,
    record_ok,
    run_row,
    spawn_cli,
    wait_for,
)

pytestmark = pytest.mark.faults


def _engine(port: int, *extra: str) -> list[str]:
    import sys

    return [sys.executable, str(FAKE_ENGINE), "--port", str(port), "--host", "127.0.0.1", *extra]


def _detach(*engine_argv: str) -> dict:
    result = cli("launch", "--force", "--detach", "--json", "--", *engine_argv)
    payload = json.loads(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert payload["state"] == "ready"
    return payload


# -- children that escape, fork, or ignore SIGTERM -----------------------------------------

ESCAPES = {
    "setsid": ("--setsid-child",),
    "daemon": ("--daemon-child",),
    "fork": ("--fork-child",),
    "setsid-ignoring-term": ("--setsid-child", "--ignore-term"),
    "daemon-ignoring-term": ("--daemon-child", "--ignore-term"),
    "group-child-ignoring-term": ("--child", "--ignore-term"),
}


@pytest.mark.parametrize("scenario", sorted(ESCAPES))
def test_stop_reaches_every_descendant(tmp_path, scenario):
    pid_file = tmp_path / "pids"
    payload = _detach(*_engine(free_port(), "--pids", str(pid_file), *ESCAPES[scenario]))
    rid = payload["run_id"]
    try:
        if "daemon" in scenario or "setsid" in scenario or "fork" in scenario:
            wait_for(lambda: pids_in(pid_file), "the engine's worker to start")
        workers = pids_in(pid_file)
        assert alive(workers) == workers
        stopped = cli("stop", "--grace", "1", "--json", rid)
        assert stopped.returncode == 0, stopped.stderr
        out = json.loads(stopped.stdout)
        assert out["state"] == "stopped"
        assert out["survivors"] == []
        assert "STILL ALIVE" not in out["detail"]
        if scenario.startswith(("setsid", "daemon")):
            assert "outside its group" in out["detail"], out["detail"]
        if "ignoring-term" in scenario:
            assert out["killed"] is True
    finally:
        cli("stop", "--grace", "0", rid)
        kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)
    row = run_row(rid)
    assert row["state"] == "stopped"
    assert record_ok(row["run_dir"])["state"] == "stopped"


def test_stop_says_what_survives(tmp_path, monkeypatch):
    # A process that cannot be killed (here: one we pretend stays, by making the kill a
    # no-op) must be named, not summed up as "stopped (1 process)".
    from servepilot.runs import tree

    pid_file = tmp_path / "pids"
    payload = _detach(*_engine(free_port(), "--pids", str(pid_file), "--setsid-child"))
    rid = payload["run_id"]
    try:
        worker = wait_for(lambda: pids_in(pid_file), "the worker")[0]
        real = tree.signal_members

        def spare_the_worker(targets, sig):
            real([m for m in targets if m.pid != worker], sig)

        real_wait = tree.wait_gone

        def wait_for_the_others(targets, deadline, poll_s=0.05):
            # the signalled processes go as soon as the kernel reaps them (a condition, not a
            # time: on a loaded box that can outlast the grace); the spared worker stays
            others = [t for t in targets if t.pid != worker]
            left = real_wait(others, time.monotonic() + PATIENCE_S, poll_s)
            return left + [t for t in targets if t.pid == worker and alive([t.pid])]

        with monkeypatch.context() as m:
            m.setattr(tree, "signal_members", spare_the_worker)
            m.setattr(tree, "wait_gone", wait_for_the_others)
            result = manage.stop_run(rid, grace_s=0.2)
        assert result.survivors == [worker]
        assert f"STILL ALIVE: pid {worker}" in result.detail
        assert "outside the run's group" in result.detail
    finally:
        cli("stop", "--grace", "0", rid)
        kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)


# -- the supervisor killed at every phase ----------------------------------------------------

def _supervisor(tmp_path, *extra_engine) -> tuple[psutil.Popen, Path]:
    pid_file = tmp_path / "pids"
    argv = _engine(free_port(), "--pids", str(pid_file), *extra_engine)
    return spawn_cli("launch", "--force", "--", *argv), pid_file


def _only_run() -> dict:
    """The run once its engine's pid is on record (the window before that has its own test)."""
    return wait_for(lambda: next((r for r in ps() if r["pid"]), None), "the run's pid on record")


@pytest.mark.parametrize("phase", ["loading", "ready"])
def test_supervisor_killed_then_ps_tells_the_truth(tmp_path, phase):
    sup, pid_file = _supervisor(tmp_path, "--setsid-child", "--ready-after", "1" if phase == "ready" else "600")
    rid = None
    try:
        row = _only_run()
        rid = row["run_id"]
        log = Path(row["run_dir"]) / rundir.LOG_NAME
        wait_for(lambda: "loading weights" in log.read_text(errors="replace"), "load progress")
        if phase == "ready":
            wait_for(lambda: run_row(rid)["state"] == "ready", "the supervisor to see ready")
        sup.kill()
        sup.wait()
        if phase == "loading":
            row = run_row(rid)
            assert row["state"] == "starting" and row["supervised"] is False
            assert "supervisor has gone" in row["note"]
        else:
            assert run_row(rid)["state"] == "ready"
        stopped = cli("stop", "--grace", "1", "--json", rid)
        assert json.loads(stopped.stdout)["state"] == "stopped"
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        sup.stdout.close()
        if rid:
            cli("stop", "--grace", "0", rid)
            kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)
    assert run_row(rid)["state"] == "stopped"


def test_supervisor_killed_while_loading_then_engine_serves(tmp_path):
    sup, pid_file = _supervisor(tmp_path, "--ready-after", "1.5")
    rid = None
    try:
        row = _only_run()
        rid = row["run_id"]
        sup.kill()
        sup.wait()
        # Nobody follows the start any more; once the engine answers /health, ps says so.
        wait_for(lambda: run_row(rid)["state"] == "ready", "ps to find the engine serving")
        db = store.connect()
        try:
            assert store.get_run(db, rid)["ready_at"] is not None  # recorded, not only shown
        finally:
            db.close()
    finally:
        sup.stdout.close()
        if rid:
            cli("stop", "--grace", "0", rid)
            kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)


@pytest.mark.parametrize("exit_code,state", [(1, "failed"), (0, "lost")])
def test_supervisor_killed_then_engine_dies(tmp_path, exit_code, state):
    # The engine prints a CUDA OOM (or nothing) and exits while nobody supervises it.
    log = tmp_path / "canned.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" if exit_code else "")
    sup, pid_file = _supervisor(tmp_path, "--log", str(log), "--delay", "1.5", "--exit", str(exit_code))
    rid = None
    try:
        rid = _only_run()["run_id"]
        sup.kill()
        sup.wait()
        wait_for(lambda: run_row(rid)["state"] not in ("starting",), "ps to see the end")
        row = run_row(rid)
        assert row["state"] == state
        if exit_code:
            assert row["category"] in ("oom_weights", "oom_kv_cache", "other")
    finally:
        sup.stdout.close()
        if rid:
            kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)


def test_supervisor_killed_during_stop(tmp_path):
    # `stop` itself killed half way (after SIGTERM, before SIGKILL): a second stop finishes.
    pid_file = tmp_path / "pids"
    payload = _detach(*_engine(free_port(), "--pids", str(pid_file), "--setsid-child", "--ignore-term"))
    rid = payload["run_id"]
    stopper = spawn_cli("stop", "--grace", "600", rid)
    try:
        wait_for(lambda: run_row(rid)["state"] == "stopped", "the first stop to record itself")
        stopper.kill()
        stopper.wait()
        out = json.loads(cli("stop", "--grace", "0", "--json", rid).stdout)
        assert out["survivors"] == []
    finally:
        stopper.stdout.close()
        kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)


# -- races -----------------------------------------------------------------------------------

def test_two_launches_racing_for_one_port(tmp_path):
    port = free_port()
    a = spawn_cli("launch", "--force", "--json", "--detach", "--", *_engine(port, "--ready-after", "0.5"))
    b = spawn_cli("launch", "--force", "--json", "--detach", "--", *_engine(port, "--ready-after", "0.5"))
    outs = [p.communicate(timeout=PATIENCE_S)[0] for p in (a, b)]
    payloads = [json.loads(o) for o in outs]
    rids = [p["run_id"] for p in payloads]
    try:
        assert sorted(p["state"] for p in payloads) == ["failed", "ready"], outs
        loser = next(p for p in payloads if p["state"] == "failed")
        assert loser["diagnosis"]["root_cause"]["category"] == "port_in_use"
        assert len({p["run_dir"] for p in payloads}) == 2
    finally:
        for rid in rids:
            cli("stop", "--grace", "0", rid)
    assert_no_orphans(rids)
    assert sorted(r["state"] for r in ps()) == ["failed", "stopped"]


def test_racing_run_directories_never_clash(monkeypatch):
    # Same name, same second, same random part for the first tries: every racer still gets
    # its own directory.
    import secrets

    tokens = iter(["aaaaaa"] * 8 + [f"{i:06x}" for i in range(100)])
    lock = threading.Lock()

    def token_hex(n):
        with lock:
            return next(tokens)

    monkeypatch.setattr(secrets, "token_hex", token_hex)
    made: list[Path] = []

    def make():
        made.append(rundir.create_run_dir("race")[1])

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 8 and len(set(made)) == 8


def test_racing_writers_share_the_history(tmp_path):
    # Eight processes insert and update runs at once: every row arrives, none is torn.
    code = (
        "import sys,time\n"
        "from servepilot.runs import store\n"
        "db=store.connect()\n"
        "for i in range(15):\n"
        "    rid=f'{sys.argv[1]}-{i}'\n"
        "    store.insert_run(db,id=rid,created_at=time.time(),run_dir='/x',argv_json=[],env_json={},"
        "state='starting')\n"
        "    store.update_run(db,rid,only_if_state=('starting',),state='ready')\n"
    )
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", code, f"w{n}"]) for n in range(8)]
    assert [p.wait() for p in procs] == [0] * 8
    db = sqlite3.connect(store.db_path())
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute("SELECT state, COUNT(*) FROM runs GROUP BY state").fetchall()
    finally:
        db.close()
    assert rows == [("ready", 120)]


# -- a full disk -------------------------------------------------------------------------------

def _full_disk(monkeypatch):
    """Writes of run.json land on /dev/full: the kernel answers ENOSPC, as a full disk does."""
    import tempfile

    real = tempfile.mkstemp

    def mkstemp(*a, **kw):
        fd, path = real(*a, **kw)
        os.close(fd)
        return os.open("/dev/full", os.O_WRONLY), path

    monkeypatch.setattr(rundir.tempfile, "mkstemp", mkstemp)


def test_full_disk_while_writing_the_run_record(fake_cmd, monkeypatch):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    ctx = monkeypatch.context()
    _full_disk(ctx.__enter__())
    plan = launch.prepare_launch(fake_cmd(), force=True)
    run = launch.start_run(plan)
    try:
        outcome = launch.Supervisor(run, ready_timeout_s=120).wait_ready()
        assert outcome.state == "ready"
        # The history (the record of truth) has everything; run.json was never torn: it
        # is either absent or a whole earlier version.
        db = store.connect()
        try:
            assert store.get_run(db, run.run_id)["state"] == "ready"
        finally:
            db.close()
        record = run.run_dir / rundir.RECORD_NAME
        if record.exists():
            json.loads(record.read_text())
        assert not list(run.run_dir.glob(".run.json.*"))  # no temporary left behind
        assert manage.stop_run(run.run_id, grace_s=2).state == "stopped"
    finally:
        ctx.__exit__(None, None, None)
        manage.stop_run(run.run_id, grace_s=0)
    run.proc.wait()
    assert_no_orphans([run.run_id])


def test_full_disk_before_the_engine_starts(fake_cmd, monkeypatch):
    # The first write (command.txt) fails: a one-line error, no run directory, no process.
    from servepilot.errors import BadInput

    real_write = Path.write_text

    def enospc(self, *a, **kw):
        if self.name == rundir.COMMAND_NAME:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, *a, **kw)

    monkeypatch.setattr(Path, "write_text", enospc)
    plan = launch.prepare_launch(fake_cmd(), force=True)
    with pytest.raises(BadInput, match="No space left"):
        launch.start_run(plan)
    assert list(rundir.runs_root().iterdir()) == []


# -- the log under the follower ------------------------------------------------------------------

def test_log_truncated_and_rotated_under_the_follower(tmp_path):
    from servepilot.runs.follow import LogFollower

    log = tmp_path / "server.log"
    writer = open(log, "a")  # the engine's O_APPEND descriptor
    follower = LogFollower(log)
    try:
        writer.write("one\n")
        writer.flush()
        assert follower.read_new() == "one\n"
        os.truncate(log, 0)  # copytruncate
        writer.write("two\n")
        writer.flush()
        assert follower.read_new() == "two\n"
        log.rename(tmp_path / "server.log.1")  # rename rotation: the engine keeps its fd
        writer.write("three\n")
        writer.flush()
        assert follower.read_new() == "three\n"
    finally:
        follower.close()
        writer.close()


def test_logs_follow_survives_truncation(tmp_path):
    pid_file = tmp_path / "pids"
    payload = _detach(*_engine(free_port(), "--pids", str(pid_file)))
    rid = payload["run_id"]
    follower = spawn_cli("logs", "-f", rid)
    try:
        os.truncate(payload["log"], 0)
        with open(payload["log"], "a") as fh:
            fh.write("after truncation\n")
        line = wait_for(lambda: follower.stdout.readline(), "logs -f output")
        lines = [line]
        while "after truncation" not in lines[-1]:
            lines.append(follower.stdout.readline())
        cli("stop", "--grace", "1", rid)
        follower.wait()
        assert follower.returncode == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
        follower.stdout.close()
        kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)


# -- early exits and stops during start-up --------------------------------------------------------

def test_engine_that_exits_0_before_ready(fake_cmd):
    result = cli("launch", "--force", "--json", "--", *fake_cmd("--exit", "0"))
    payload = json.loads(result.stdout)
    assert result.returncode == 3
    assert payload["state"] == "failed" and payload["exit_code"] == 0
    assert "exited with code 0" in payload["reason"]
    assert [r["state"] for r in ps()] == ["failed"]
    assert_no_orphans([payload["run_id"]])


def test_stop_during_start_up(tmp_path):
    sup, pid_file = _supervisor(tmp_path, "--setsid-child", "--ready-after", "600")
    rid = None
    try:
        rid = _only_run()["run_id"]
        wait_for(lambda: pids_in(pid_file), "the engine's worker")
        stopped = json.loads(cli("stop", "--grace", "1", "--json", rid).stdout)
        assert stopped["state"] == "stopped" and stopped["survivors"] == []
        out = sup.communicate(timeout=PATIENCE_S)[0]
        assert sup.returncode == 3
        assert "stopped by `servepilot stop`" in out
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        sup.stdout.close()
        if rid:
            kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)
    assert run_row(rid)["state"] == "stopped"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_the_supervisor_during_start_up(tmp_path, sig):
    sup, pid_file = _supervisor(tmp_path, "--setsid-child", "--ready-after", "600")
    rid = None
    try:
        rid = _only_run()["run_id"]
        wait_for(lambda: pids_in(pid_file), "the engine's worker")
        sup.send_signal(sig)
        sup.communicate(timeout=PATIENCE_S)  # a lost signal fails the test, never hangs the suite
        assert sup.returncode == 130
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        sup.stdout.close()
        if rid:
            kill_everything([rid], pid_file)
    assert_no_orphans([rid], pid_file)
    assert run_row(rid)["state"] == "stopped"


def test_supervisor_killed_before_the_pid_is_recorded(tmp_path, fake_cmd, monkeypatch):
    # The narrowest window: the history row exists, the engine runs, its pid is not on
    # record (the supervisor died in between). ps must not call it exited while its
    # supervisor lives, and once that is gone, stop finds the engine by its marker.
    import subprocess
    import sys
    import time

    from servepilot.runs import process, tree

    db = store.connect()
    try:
        rid = "20260101-000000-abcdef"
        run_dir = rundir.runs_root() / rid
        run_dir.mkdir(parents=True)
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        me = process.self_identity()
        store.insert_run(db, id=rid, created_at=time.time() - 0.5, run_dir=str(run_dir), argv_json=[],
                         env_json={}, state="starting", supervisor_pid=me.pid,
                         supervisor_start_time=me.start_time)
    finally:
        db.close()
    engine = subprocess.Popen(fake_cmd("--ready-after", "600"), env={**os.environ, tree.RUN_MARKER: rid})
    try:
        assert run_row(rid)["state"] == "starting"  # its supervisor (this test) is alive
        db = store.connect()
        try:  # the supervisor is gone now: a process that no longer exists
            helper.kill()
            helper.wait()
            store.update_run(db, rid, supervisor_pid=helper.pid, supervisor_start_time=me.start_time)
        finally:
            db.close()
        assert run_row(rid)["state"] == "starting" and run_row(rid)["supervised"] is False
        out = manage.stop_run(rid, grace_s=2)
        assert out.state == "stopped" and "marker" in out.detail and out.survivors == []
        assert engine.wait() is not None
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    assert_no_orphans([rid])
