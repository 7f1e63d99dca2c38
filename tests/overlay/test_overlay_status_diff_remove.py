"""`overlay status|diff|remove`, through the library and the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import KV_SCHEME_PATCHES, inventory

from servepilot.cli.main import main
from servepilot.overlay import (
    MANIFEST_NAME,
    NotAnOverlay,
    OverlayError,
    PathEscape,
    overlay_diff,
    overlay_status,
    plan_overlay,
    plan_removal,
)


@pytest.fixture
def built(checkpoint):
    return checkpoint, plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()


def drift_of(overlay: Path) -> set[tuple[str, str, str]]:
    return {(d.path, d.side, d.change) for d in overlay_status(overlay).drift}


def test_fresh_overlay_is_clean(built):
    _, overlay = built
    status = overlay_status(overlay)
    assert status.clean and status.drift == ()
    assert status.files_checked == 5


def test_every_kind_of_change_to_the_original_is_reported_file_by_file(built):
    original, overlay = built
    shard1 = original / "model-00001-of-00002.safetensors"
    with open(shard1, "ab") as fh:
        fh.write(b"more")
    shard2 = original / "model-00002-of-00002.safetensors"
    st = shard2.stat()
    os.utime(shard2, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same size, newer
    (original / "tokenizer" / "tokenizer.json").unlink()
    (original / "tokenizer" / "added.json").write_text("{}")
    (original / "config.json").write_text((original / "config.json").read_text().replace("64", "128"))

    assert drift_of(overlay) == {
        ("model-00001-of-00002.safetensors", "original", "changed"),
        ("model-00002-of-00002.safetensors", "original", "changed"),
        ("tokenizer/tokenizer.json", "original", "missing"),
        ("tokenizer/added.json", "original", "new"),
        ("config.json", "original", "changed"),
    }


def test_edits_inside_the_overlay_are_reported(built):
    _, overlay = built
    (overlay / "hf_quant_config.json").write_text("{}")
    (overlay / "model-00001-of-00002.safetensors").unlink()
    (overlay / "stray.txt").write_text("x")
    assert drift_of(overlay) == {
        ("hf_quant_config.json", "overlay", "changed"),
        ("model-00001-of-00002.safetensors", "overlay", "missing"),
        ("stray.txt", "overlay", "new"),
    }


def test_status_cli_exit_codes_and_json(built, capsys):
    original, overlay = built
    assert main(["overlay", "status", str(overlay)]) == 0
    assert "clean" in capsys.readouterr().out

    (original / "new-shard.safetensors").write_bytes(b"\0" * 8)
    assert main(["overlay", "status", "--json", str(overlay)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert list(out)[0] == "schema" and out["schema"] == "servepilot.overlay-status/1"
    assert out["clean"] is False
    assert out["drift"] == [
        {"path": "new-shard.safetensors", "side": "original", "change": "new",
         "detail": "file added to the original after the overlay was built"}
    ]


def test_diff_shows_the_patches_and_the_removed_lines(built, capsys):
    _, overlay = built
    diff = overlay_diff(overlay)
    by_path = {f.path: f for f in diff.files}
    assert list(by_path["config.json"].patch) == KV_SCHEME_PATCHES["config.json"]
    removed = [ln for ln in by_path["hf_quant_config.json"].unified.splitlines()
               if ln.startswith("-") and not ln.startswith("---")]
    assert removed == ['-        "kv_cache_quant_algo": "FP8",']

    assert main(["overlay", "diff", "--json", str(overlay)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "servepilot.overlay-diff/1"
    assert {f["path"] for f in out["files"]} == {"config.json", "hf_quant_config.json"}
    assert main(["overlay", "diff", str(overlay)]) == 0
    assert '-    "kv_cache_scheme": {' in capsys.readouterr().out


def test_remove_deletes_only_what_servepilot_made(built, capsys):
    original, overlay = built
    before = inventory(original)
    (overlay / "tokenizer" / "notes.md").write_text("operator's file")

    assert main(["overlay", "remove", str(overlay)]) == 0
    out = capsys.readouterr().out
    assert "tokenizer/notes.md" in out
    remaining = sorted(p.relative_to(overlay).as_posix() for p in overlay.rglob("*"))
    assert remaining == ["tokenizer", "tokenizer/notes.md"]
    assert inventory(original) == before


def test_remove_keeps_a_patched_file_edited_after_the_build(built):
    _, overlay = built
    (overlay / "config.json").write_text('{"hand": "edited"}')
    result = plan_removal(overlay).execute()
    assert result.kept == ("config.json",)
    assert not result.directory_removed
    assert sorted(p.name for p in overlay.iterdir()) == ["config.json"]


def test_remove_of_a_clean_overlay_leaves_nothing(built, capsys):
    _, overlay = built
    assert main(["overlay", "remove", "--json", str(overlay)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "servepilot.overlay-remove/1"
    assert out["directory_removed"] is True and out["kept"] == []
    assert not overlay.exists()


def test_remove_dry_run_removes_nothing(built):
    _, overlay = built
    before = inventory(overlay)
    assert main(["overlay", "remove", "--dry-run", str(overlay)]) == 0
    assert inventory(overlay) == before


def test_remove_refuses_a_directory_without_manifest(checkpoint, capsys):
    before = inventory(checkpoint)
    assert main(["overlay", "remove", str(checkpoint)]) == 2
    assert "not a servepilot overlay" in capsys.readouterr().err
    with pytest.raises(NotAnOverlay):
        plan_removal(checkpoint)
    assert inventory(checkpoint) == before


def test_hostile_manifest_cannot_steer_remove_outside_the_overlay(built, tmp_path):
    _, overlay = built
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    manifest = json.loads((overlay / MANIFEST_NAME).read_text())
    manifest["linked"].append({"path": "../../victim.txt", "target": str(victim), "size": 8, "mtime_ns": 0})
    (overlay / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(PathEscape):
        plan_removal(overlay)
    assert victim.read_text() == "precious"


def test_read_only_original_is_byte_identical_through_build_status_diff_remove(read_only_checkpoint, capsys):
    original = read_only_checkpoint
    before = inventory(original)
    overlay = plan_overlay(original, KV_SCHEME_PATCHES).execute()
    assert main(["overlay", "status", str(overlay)]) == 0
    assert main(["overlay", "diff", str(overlay)]) == 0
    assert main(["overlay", "remove", str(overlay)]) == 0
    assert not overlay.exists()
    assert inventory(original) == before


def test_a_directory_swapped_for_a_symlink_after_planning_cannot_steer_remove(built):
    # Between `overlay remove`'s plan (and its confirmation prompt) and the unlinks, the
    # overlay's sub-directory becomes a link into the original: unlinking
    # overlay/tokenizer/tokenizer.json would then delete the original's file.
    original, overlay = built
    plan = plan_removal(overlay)
    assert "tokenizer/tokenizer.json" in plan.links
    before = inventory(original)
    os.rename(overlay / "tokenizer", overlay / "tokenizer.moved")
    os.symlink(original / "tokenizer", overlay / "tokenizer")
    plan.execute()
    assert inventory(original) == before


def test_a_patched_file_edited_after_planning_is_kept(built):
    _, overlay = built
    plan = plan_removal(overlay)
    assert "config.json" in plan.files
    (overlay / "config.json").write_text('{"hand": "edited"}')
    result = plan.execute()
    assert (overlay / "config.json").read_text() == '{"hand": "edited"}'
    assert "config.json" in result.kept


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_patched_original_replaced_by_a_directory_or_fifo_is_drift_not_a_crash_or_hang(built, kind):
    # sha256 of the original's config.json: a directory raised IsADirectoryError, a FIFO
    # blocked `overlay status` forever.
    original, overlay = built
    os.rename(original / "config.json", original / "config.json.moved")
    if kind == "directory":
        (original / "config.json").mkdir()
    else:
        os.mkfifo(original / "config.json")
    assert ("config.json", "original", "changed") in drift_of(overlay)


def test_a_patched_file_in_the_overlay_replaced_by_a_fifo_is_drift(built):
    _, overlay = built
    os.unlink(overlay / "config.json")
    os.mkfifo(overlay / "config.json")
    assert ("config.json", "overlay", "missing") in drift_of(overlay)


def test_remove_refuses_an_overlay_a_running_process_was_started_on(built, capsys):
    # An engine started on the overlay (vllm serve <overlay>) reads its files for minutes;
    # removing them under it fails the load, like removing a live process's files.
    import subprocess
    import sys

    _, overlay = built
    before = inventory(overlay)
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "serve", str(overlay) + "/"])
    try:
        with pytest.raises(OverlayError, match=f"in use by pid {engine.pid}"):
            plan_removal(overlay)
        assert main(["overlay", "remove", str(overlay)]) == 2
        assert inventory(overlay) == before
    finally:
        engine.kill()
        engine.wait()
    # A process naming a longer path that merely starts with the overlay's is not a user.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(overlay) + "-other"])
    try:
        plan_removal(overlay).execute()
        assert not overlay.exists()
    finally:
        other.kill()
        other.wait()
