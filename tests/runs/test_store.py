import multiprocessing
import sqlite3
import time

from servepilot.runs import store


def test_migrations_produce_the_expected_columns(tmp_path):
    db = store.connect(tmp_path / "h.sqlite3")
    runs = set(store.columns(db, "runs"))
    assert {"id", "name", "created_at", "run_dir", "engine", "engine_version", "model", "argv_json",
            "env_json", "cwd", "host", "port", "pid", "pid_start_time", "pgid", "state", "exit_code",
            "ended_at", "check_verdict", "ready_at", "served_model", "category", "diagnosis_json",
            "options_json", "overlay", "gpu_key", "gpus_json", "model_key"} <= runs
    assert set(store.columns(db, "measurements")) >= {"run_id", "model", "engine", "gpu_key", *store.MEASUREMENT_FIELDS}
    names = [r[0] for r in db.execute("SELECT name FROM _migrations ORDER BY rowid")]
    assert names == [name for name, _ in store.MIGRATIONS]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_migrations_apply_once_and_resume_from_an_older_database(tmp_path):
    path = tmp_path / "h.sqlite3"
    # An older servepilot that only knew the first migration.
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    store.m001_runs(db)
    db.execute("INSERT INTO _migrations VALUES ('m001_runs', 0)")
    db.close()
    db = store.connect(path)
    assert "model_key" in store.columns(db, "runs")
    assert store.migrate(db) == []


def _writer(path, n, worker):
    db = store.connect(path)
    for i in range(n):
        rid = f"w{worker}-{i}"
        store.insert_run(db, id=rid, created_at=time.time(), run_dir="/x", argv_json=["a"], env_json={},
                         state="starting")
        store.update_run(db, rid, state="ready")
    db.close()


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "h.sqlite3"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 40, w)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = store.connect(path)
    assert db.execute("SELECT count(*) FROM runs WHERE state = 'ready'").fetchone()[0] == 240


def test_state_guard_keeps_a_recorded_outcome(tmp_path):
    db = store.connect(tmp_path / "h.sqlite3")
    store.insert_run(db, id="r1", created_at=1.0, run_dir="/x", argv_json=[], env_json={}, state="starting")
    assert store.update_run(db, "r1", state="stopped")
    assert not store.update_run(db, "r1", only_if_state=("starting", "ready"), state="exited")
    assert store.get_run(db, "r1")["state"] == "stopped"


def test_find_runs_by_id_prefix_and_name(tmp_path):
    db = store.connect(tmp_path / "h.sqlite3")
    for rid, name in (("kimi-20260101-1", "kimi"), ("20260101-2", None), ("20260102-3", None)):
        store.insert_run(db, id=rid, name=name, created_at=time.time(), run_dir="/x", argv_json=[], env_json={},
                         state="ready")
    assert [r["id"] for r in store.find_runs(db, "kimi")] == ["kimi-20260101-1"]
    assert [r["id"] for r in store.find_runs(db, "20260102")] == ["20260102-3"]
    assert len(store.find_runs(db, "2026010")) == 2
    assert store.find_runs(db, "%") == []  # LIKE wildcards are literal


def test_latest_measurement_picks_the_newest_for_the_key():
    db = store.connect()
    for rid in ("a", "b", "c"):
        store.insert_run(db, id=rid, created_at=time.time(), run_dir="/x", argv_json=[], env_json={}, state="ready")
    store.record_measurement(db, "a", model="m", engine="vllm", gpu_key="h200", figures={"kv_tokens": 100})
    time.sleep(0.01)
    store.record_measurement(db, "b", model="m", engine="vllm", gpu_key="h200",
                             figures={"kv_tokens": 200, "max_concurrency": 1.5, "available_kv_bytes": 10})
    store.record_measurement(db, "c", model="m", engine="vllm", gpu_key="a100", figures={"kv_tokens": 300})
    db.close()
    got = store.latest_measurement("m", "vllm", "h200")
    assert got["run_id"] == "b" and got["kv_tokens"] == 200 and got["max_concurrency"] == 1.5
    assert got["weights_bytes"] is None
    assert store.latest_measurement("m", "vllm", None) is None
    assert store.latest_measurement("other", "vllm", "h200") is None


def test_latest_measurement_without_history_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEPILOT_HOME", str(tmp_path / "empty"))
    assert store.latest_measurement("m", "vllm", None) is None
    assert not (tmp_path / "empty").exists()


def test_an_open_that_sqlite_refuses_at_once_as_locked_is_tried_again(tmp_path, monkeypatch):
    # SQLite's "database is locked" without waiting (a WAL switch or checkpoint by another
    # connection at that moment) is transient: the open is tried again, not reported.
    real_open = store._open
    refusals = []

    def locked_twice(path):
        if len(refusals) < 2:
            refusals.append(path)
            raise sqlite3.OperationalError("database is locked")
        return real_open(path)

    monkeypatch.setattr(store, "_open", locked_twice)
    db = store.connect(tmp_path / "h.sqlite3")
    assert len(refusals) == 2
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_a_history_that_stays_locked_is_reported_once_the_wait_is_over(tmp_path, monkeypatch):
    import pytest

    from servepilot.errors import BadInput

    monkeypatch.setattr(store, "BUSY_TIMEOUT_MS", 50)

    def always_locked(path):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(store, "_open", always_locked)
    with pytest.raises(BadInput, match="database is locked"):
        store.connect(tmp_path / "h.sqlite3")
