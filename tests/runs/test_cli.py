import dataclasses
import json
import sys

import pytest
from patience import PATIENCE_S

from servepilot.checks.finding import Finding, Remedy
from servepilot.cli.main import main
from servepilot.runs import integration, launch, process, store


@pytest.fixture
def reap_detached():
    yield
    for proc in launch._DETACHED:
        if proc.poll() is None:
            proc.kill()
        proc.wait(PATIENCE_S)
    launch._DETACHED.clear()


def test_detached_launch_then_ps_stop_history(fake_cmd, capsys, reap_detached):
    rc = main(["launch", "--name", "web", "--detach", "--force", "--json", "--", *fake_cmd()])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["schema"] == "servepilot.launch/1" and out["state"] == "ready"
    assert out["served_models"] == ["fake-model"]
    pid = out["pid"]
    assert main(["ps", "--json"]) == 0
    ps = json.loads(capsys.readouterr().out)
    assert ps["schema"] == "servepilot.ps/1"
    assert [(r["name"], r["state"], r["pid"]) for r in ps["runs"]] == [("web", "ready", pid)]
    assert main(["logs", "web", "--json"]) == 0
    logs = json.loads(capsys.readouterr().out)
    assert "INFO:     Application startup complete." in logs["lines"]
    assert main(["stop", "web", "--grace", "5", "--json"]) == 0
    stopped = json.loads(capsys.readouterr().out)
    assert stopped["state"] == "stopped"
    launch._DETACHED[0].wait(PATIENCE_S)
    assert process.group_members(out["pgid"]) == []
    assert main(["history", "--json"]) == 0
    hist = json.loads(capsys.readouterr().out)
    assert hist["schema"] == "servepilot.history/1"
    assert hist["models"][0]["attempts"][0]["state"] == "stopped"


def test_failed_launch_exits_3_with_the_diagnosis(fake_cmd, capsys):
    rc = main(["launch", "--force", "--", *fake_cmd("--exit", "1")])
    text = capsys.readouterr().out
    assert rc == 3
    assert "failed after" in text and "root cause:" in text


@dataclasses.dataclass(frozen=True)
class _FailingCheck:
    """The shape of checks.CheckResult that launch reads."""

    verdict: str = "fail"
    findings: tuple = (
        Finding(code="SP-ATTN-001", category="attention_backend", severity="error", title="no MLA backend for fp8 KV "
                                                                                          "on SM120",
                detail="d", remedies=(Remedy(kind="flag", change="--kv-cache-dtype bfloat16", tradeoff="KV doubles"),)),
    )
    resolved: dict = dataclasses.field(default_factory=dict)
    plan: object = None


def test_predicted_failure_is_refused_with_the_fix(monkeypatch, capsys, fake_cmd):
    monkeypatch.setattr(integration, "run_check", lambda cmd, force=False: (_FailingCheck(), None))
    monkeypatch.setattr(integration, "build_launch_command",
                        lambda *a, **k: integration.unchecked_command(list(a[0]), None, None))
    rc = main(["launch", "--", *fake_cmd()])
    text = capsys.readouterr().out
    assert rc == 1
    assert "SP-ATTN-001" in text and "--kv-cache-dtype bfloat16" in text
    assert "servepilot fix -- " in text
    db = store.connect()
    assert store.list_runs(db) == []  # nothing started
    db.close()
    rc = main(["launch", "--json", "--", *fake_cmd()])
    refused = json.loads(capsys.readouterr().out)
    assert rc == 1 and refused["state"] == "refused" and refused["suggestion"].startswith("servepilot fix -- ")


def test_bad_name_is_exit_2(capsys):
    assert main(["launch", "--name", "../x", "--", sys.executable, "-c", "pass"]) == 2
    assert "run name" in capsys.readouterr().err


def test_cleanup_lists_without_removing(capsys):
    assert main(["cleanup", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "servepilot.cleanup/1" and out["removed"] == 0


def test_command_file_launch_drops_the_scripts_redirections(fake_cmd, tmp_path, capsys, reap_detached):
    import shlex

    script = tmp_path / "serve.sh"
    stray = tmp_path / "nohup.log"
    script.write_text(f"#!/bin/bash\nMODE=fast nohup {shlex.join(fake_cmd())} > {stray} 2>&1 &\n")
    rc = main(["launch", "--force", "--detach", "--json", "--command-file", str(script)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["state"] == "ready"
    assert any("dropped" in n and str(stray) in n for n in out["notes"])
    assert not stray.exists()
    assert main(["stop", out["run_id"]]) == 0
    capsys.readouterr()


def test_a_supervisor_that_fails_does_not_leave_its_engine_running(fake_cmd, monkeypatch, capsys):
    # Any error inside supervision (not only Ctrl-C) used to end the CLI with the engine
    # still running, recorded as starting, watched by nobody.
    started = []
    real_start = launch.start_run

    def start_and_remember(*a, **kw):
        run = real_start(*a, **kw)
        started.append(run)
        return run

    def broken_wait(self):
        raise RuntimeError("supervisor bug")

    monkeypatch.setattr(launch, "start_run", start_and_remember)
    monkeypatch.setattr(launch.Supervisor, "wait_ready", broken_wait)
    from servepilot.cli.main import INTERNAL_ERROR_EXIT

    monkeypatch.delenv("SERVEPILOT_DEBUG", raising=False)
    assert main(["launch", "--force", "--", *fake_cmd()]) == INTERNAL_ERROR_EXIT
    assert "supervisor bug" in capsys.readouterr().err
    (run,) = started
    assert run.proc.wait(PATIENCE_S) is not None
    assert process.group_members(run.identity.pgid, not_before=run.identity.start_time) == []
    db = store.connect()
    try:
        assert store.get_run(db, run.run_id)["state"] == "failed"
    finally:
        db.close()
