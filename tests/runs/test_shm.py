import os
import subprocess
import sys
import time

import pytest

from servepilot.runs import shm


@pytest.fixture
def all_processes_visible(monkeypatch):
    """Some sandboxes hide a process from root (PID 1 of a container runtime); scan then
    reports every file of that uid as `unknown` and removes nothing, correctly. To exercise
    removal, these tests see holders as scanned for real but without the blind uids."""
    real = shm._scan

    def visible(d, names=()):
        held, _blind, named = real(d, names)
        return held, set(), named

    monkeypatch.setattr(shm, "_scan", visible)


def test_an_invisible_process_makes_files_of_its_uid_unknown(tmp_path, monkeypatch):
    target = tmp_path / "psm_x"
    target.write_bytes(b"x")
    _age(target, 3600)
    real = shm._scan

    def blind(d, names=()):
        held, _blind, named = real(d, names)
        return held, {os.getuid()}, named

    monkeypatch.setattr(shm, "_scan", blind)
    entries = shm.scan(tmp_path)
    assert entries[0].status == "unknown"
    assert "cannot be inspected" in entries[0].reason and f"uid {os.getuid()}" in entries[0].reason
    assert not shm.remove_leftovers(entries, tmp_path)[0].removed and target.exists()


def _age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_cleanup_never_touches_a_live_processs_file(tmp_path, all_processes_visible):
    held_open = tmp_path / "psm_live"
    held_mapped = tmp_path / "nccl-mapped"
    dead = tmp_path / "sem.mp-dead"
    unrelated = tmp_path / "my-own-data"
    fresh = tmp_path / "vllm-fresh"
    for p in (held_open, held_mapped, dead, unrelated):
        p.write_bytes(b"\0" * 4096)
        _age(p, 3600)
    fresh.write_bytes(b"\0")
    code = (
        "import mmap,sys,time\n"
        f"f=open({str(held_open)!r},'rb')\n"
        f"g=open({str(held_mapped)!r},'r+b'); m=mmap.mmap(g.fileno(),4096); g.close()\n"
        "print('ready',flush=True); time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        entries = {os.path.basename(e.path): e for e in shm.scan(tmp_path)}
        assert set(entries) == {"psm_live", "nccl-mapped", "sem.mp-dead", "vllm-fresh"}  # unrelated name skipped
        assert entries["psm_live"].status == "in_use" and holder.pid in entries["psm_live"].holders
        assert entries["nccl-mapped"].status == "in_use" and holder.pid in entries["nccl-mapped"].holders
        assert entries["sem.mp-dead"].status == "leftover"
        assert entries["vllm-fresh"].status == "too_new"
        # Listing removes nothing; --yes removes only the leftover.
        assert dead.exists()
        after = shm.remove_leftovers(list(entries.values()), tmp_path)
        assert [os.path.basename(e.path) for e in after if e.removed] == ["sem.mp-dead"]
        assert held_open.exists() and held_mapped.exists() and fresh.exists() and unrelated.exists()
        assert not dead.exists()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_a_file_opened_after_the_scan_is_not_removed(tmp_path, all_processes_visible):
    target = tmp_path / "psm_late"
    target.write_bytes(b"x")
    _age(target, 3600)
    entries = shm.scan(tmp_path)
    assert entries[0].status == "leftover"
    holder = subprocess.Popen([sys.executable, "-c", f"f=open({str(target)!r}); print('ok',flush=True); import time; "
                                                     "time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        after = shm.remove_leftovers(entries, tmp_path)
        assert not after[0].removed and target.exists()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_cli_lists_then_removes_with_yes(tmp_path, monkeypatch, capsys, all_processes_visible):
    from servepilot.cli.main import main

    monkeypatch.setattr(shm, "SHM_DIR", tmp_path)
    leftover = tmp_path / "psm_0123abcd"
    leftover.write_bytes(b"\0" * 1024)
    _age(leftover, 7200)
    assert main(["cleanup"]) == 0
    text = capsys.readouterr().out
    assert "leftover" in text and "cleanup --yes" in text and leftover.exists()
    assert main(["cleanup", "--yes", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["removed"] == 1 and out["entries"][0]["removed"] and not leftover.exists()


def test_a_file_recreated_under_the_same_name_after_the_scan_is_not_removed(tmp_path, all_processes_visible):
    # Between `cleanup`'s scan and its unlink, a new engine may create a segment with the
    # same name (NCCL and torch reuse name patterns): it is not the leftover that was judged.
    target = tmp_path / "psm_reused"
    target.write_bytes(b"old")
    _age(target, 3600)
    entries = shm.scan(tmp_path)
    assert entries[0].status == "leftover"
    target.unlink()
    target.write_bytes(b"new engine's segment")
    out = shm.remove_leftovers(entries, tmp_path)
    assert not out[0].removed
    assert target.read_bytes() == b"new engine's segment"


def test_a_file_a_live_process_names_is_kept(tmp_path, all_processes_visible):
    # A process that reopens a segment by name between uses holds nothing open in between;
    # its command line names the file, so cleanup keeps it (issue 17, item 7).
    target = tmp_path / "psm_reopened"
    target.write_bytes(b"x")
    _age(target, 3600)
    code = "import sys,time; print('ok',flush=True); time.sleep(600)"
    user = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        user.stdout.readline()
        (entry,) = shm.scan(tmp_path)
        assert entry.status == "named" and str(user.pid) in entry.reason
        assert not shm.remove_leftovers([entry], tmp_path)[0].removed and target.exists()
    finally:
        user.kill()
        user.wait()
        user.stdout.close()
    (entry,) = shm.scan(tmp_path)
    assert entry.status == "leftover"  # once that process is gone


def test_every_status_says_why(tmp_path, all_processes_visible):
    for name, age in (("psm_old", 3600), ("psm_new", 0)):
        (tmp_path / name).write_bytes(b"x")
        _age(tmp_path / name, age)
    entries = shm.scan(tmp_path)
    assert {e.status for e in entries} == {"leftover", "too_new"}
    assert all(e.reason for e in entries)


def test_yes_with_nothing_removable_says_so(tmp_path, monkeypatch, capsys, all_processes_visible):
    from servepilot.cli.main import main

    monkeypatch.setattr(shm, "SHM_DIR", tmp_path)
    (tmp_path / "psm_new").write_bytes(b"x")  # too new to judge
    assert main(["cleanup", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "nothing removed" in out and "too_new" in out
    assert "under 60 s" in out  # the entry's own reason
    assert (tmp_path / "psm_new").exists()
