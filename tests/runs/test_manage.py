import sys
import time

import pytest

from servepilot.errors import BadInput
from servepilot.runs import manage, store


def _insert(rid, **kw):
    db = store.connect()
    values = dict(id=rid, created_at=time.time(), run_dir=f"/runs/{rid}", argv_json=[], env_json={}, state="ready")
    values.update(kw)
    store.insert_run(db, **values)
    db.close()
    time.sleep(0.002)  # distinct created_at, so the order is the insertion order


def test_resolve_by_id_prefix_and_name():
    _insert("20260101-000000-aaaaaa", state="failed")
    _insert("20260101-000000-abbbbb", state="failed")
    _insert("kimi-20260101-000001-cccccc", name="kimi", state="failed")
    _insert("kimi-20260101-000002-dddddd", name="kimi", state="failed")
    assert manage.resolve_run("20260101-000000-aa")["id"] == "20260101-000000-aaaaaa"
    assert manage.resolve_run("kimi")["id"] == "kimi-20260101-000002-dddddd"  # newest of the name
    with pytest.raises(BadInput, match="matches 2 runs"):
        manage.resolve_run("20260101-000000-a")
    with pytest.raises(BadInput, match="no run matches"):
        manage.resolve_run("zzz")


def test_ps_marks_a_dead_or_recycled_pid_exited():
    import subprocess

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    import psutil

    me = psutil.Process()
    _insert("dead", pid=p.pid, pid_start_time=time.time() - 5, pgid=p.pid, state="ready")
    # This test process, recorded with another start time: a recycled pid.
    _insert("recycled", pid=me.pid, pid_start_time=me.create_time() - 100, pgid=me.pid, state="starting")
    _insert("alive", pid=me.pid, pid_start_time=me.create_time(), pgid=me.pid, state="ready")
    states = {r.id: r.state for r in manage.list_runs()}
    assert states == {"dead": "exited", "recycled": "exited", "alive": "ready"}
    db = store.connect()
    assert store.get_run(db, "dead")["state"] == "exited"  # persisted
    db.close()


def test_stop_refuses_a_recycled_pid_from_the_record():
    import psutil

    from servepilot.runs.process import NotOurProcess

    me = psutil.Process()
    _insert("old", pid=me.pid, pid_start_time=me.create_time() - 100, pgid=me.pid, state="ready")
    with pytest.raises(NotOurProcess):
        manage.stop_run("old", grace_s=0.1)


def test_history_shows_what_changed_between_attempts():
    _insert("a1", model="/m/kimi", model_key="/m/kimi", engine="vllm", engine_version="0.16.0", state="failed",
            category="attention_backend", options_json={"tensor-parallel-size": "8"},
            env_json={"HF_TOKEN": "<redacted>"})
    _insert("a2", model="/m/kimi", model_key="/m/kimi", engine="vllm", engine_version="0.16.0", state="failed",
            category="attention_backend",
            options_json={"tensor-parallel-size": "8",
                          "kv-cache-dtype": "bfloat16"}, env_json={"HF_TOKEN": "<redacted>"})
    _insert("a3", model="/m/kimi-overlay", model_key="/m/kimi", engine="vllm", engine_version="0.18.0", state="stopped",
            overlay="/m/kimi-overlay (patches abc of /m/kimi)", options_json={"tensor-parallel-size": "8"},
            env_json={"HF_TOKEN": "<redacted>", "VLLM_USE_V1": "1"})
    _insert("b1", model="/m/other", model_key="/m/other", state="failed")
    groups = {g["model"]: g["attempts"] for g in manage.history()}
    assert set(groups) == {"/m/kimi", "/m/other"}
    a1, a2, a3 = groups["/m/kimi"]
    assert a1["changes"] == {}
    assert a2["changes"] == {"flags": {"added": {"kv-cache-dtype": "bfloat16"}}}
    assert a3["changes"]["flags"] == {"removed": {"kv-cache-dtype": "bfloat16"}}
    assert a3["changes"]["env"] == {"added": {"VLLM_USE_V1": "1"}}
    assert a3["changes"]["engine_version"] == ["0.16.0", "0.18.0"]
    assert a3["changes"]["overlay"][1].startswith("/m/kimi-overlay")
    assert [a["state"] for a in groups["/m/kimi"]] == ["failed", "failed", "stopped"]
    assert [g["model"] for g in manage.history("/m/kimi-overlay")] == ["/m/kimi"]


@pytest.mark.parametrize("ref", ["", "  ", "KIMI-20260101"])
def test_an_empty_or_wrong_case_reference_names_no_run(ref):
    # An empty prefix matched every run (`servepilot stop ""` stopped the only one), and
    # SQLite's LIKE ignores ASCII case, so "KIMI-..." stopped the run "kimi-...".
    _insert("kimi-20260101-000001-cccccc", name="kimi", state="failed")
    with pytest.raises(BadInput):
        manage.resolve_run(ref)


def test_ps_json_has_run_id_beside_id(capsys):
    import json

    from servepilot.cli.main import main

    _insert("20260101-000000-eeeeee", state="failed")
    assert main(["ps", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["id"] == row["run_id"] == "20260101-000000-eeeeee"  # keys only added
