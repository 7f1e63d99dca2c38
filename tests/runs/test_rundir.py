import os

import pytest

from servepilot.errors import BadInput
from servepilot.runs import rundir


def test_run_ids_carry_the_name_and_differ(tmp_path):
    ids = {rundir.create_run_dir("kimi", root=tmp_path)[0] for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("kimi-") for i in ids)
    assert len(list(tmp_path.iterdir())) == 50


def test_a_clash_retries_instead_of_reusing(tmp_path, monkeypatch):
    taken = "20260101-000000-aaaaaa"
    (tmp_path / taken).mkdir()
    (tmp_path / taken / "server.log").write_text("the previous attempt\n")
    ids = iter([taken, taken, "20260101-000000-bbbbbb"])
    monkeypatch.setattr(rundir, "new_run_id", lambda name=None: next(ids))
    run_id, path = rundir.create_run_dir(root=tmp_path)
    assert run_id == "20260101-000000-bbbbbb"
    assert (tmp_path / taken / "server.log").read_text() == "the previous attempt\n"


def test_server_log_is_never_reopened(tmp_path):
    fd = rundir.open_log_exclusive(tmp_path)
    os.write(fd, b"first\n")
    os.close(fd)
    with pytest.raises(FileExistsError):
        rundir.open_log_exclusive(tmp_path)
    assert (tmp_path / "server.log").read_bytes() == b"first\n"


@pytest.mark.parametrize("bad", ["", "../x", "a b", "-x", "x" * 65, "a/b"])
def test_bad_names_are_refused(bad):
    with pytest.raises(BadInput):
        rundir.check_name(bad)


def test_record_round_trips(tmp_path):
    rundir.write_record(tmp_path, {"id": "x", "state": "ready"})
    assert rundir.read_record(tmp_path) == {"id": "x", "state": "ready"}
    assert not list(tmp_path.glob(".*.tmp"))


def test_two_writers_of_the_record_at_once_never_fail(tmp_path):
    # The supervisor records a failure while `servepilot stop` (another process) records
    # the stop: with one shared temporary name, one writer's rename found the file gone.
    import threading

    errors = []

    def writer(who):
        try:
            for i in range(300):
                rundir.write_record(tmp_path, {"who": who, "i": i})
        except Exception as exc:  # noqa: BLE001 - the test reports whatever escaped
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in ("supervisor", "stop")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert rundir.read_record(tmp_path)["i"] == 299
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary left behind
