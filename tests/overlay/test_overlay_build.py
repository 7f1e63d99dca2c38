"""Building overlays: what lands where, what the manifest proves, what is refused."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import KV_SCHEME_PATCHES, inventory, write_checkpoint

from servepilot import __version__
from servepilot.errors import CheckpointError
from servepilot.overlay import (
    MANIFEST_NAME,
    NotAnOverlay,
    OverlayError,
    PathEscape,
    overlay_status,
    plan_overlay,
    read_manifest,
)


def test_overlay_links_every_file_and_writes_only_the_patched_ones(checkpoint):
    dest = plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()

    assert dest == checkpoint.parent / f"{checkpoint.name}-servepilot-{read_manifest(dest).patches_hash}"
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tokenizer/tokenizer.json"):
        link = dest / name
        assert link.is_symlink()
        assert not os.path.isabs(os.readlink(link))  # relative: survives a remount (issue 17)
        assert link.resolve() == (checkpoint / name).resolve()
        assert link.read_bytes() == (checkpoint / name).read_bytes()
    assert (dest / "tokenizer").is_dir() and not (dest / "tokenizer").is_symlink()
    for name in ("config.json", "hf_quant_config.json"):
        assert not (dest / name).is_symlink()
    config = json.loads((dest / "config.json").read_text())
    assert "kv_cache_scheme" not in config["quantization_config"]
    assert config["quantization_config"]["quant_algo"] == "NVFP4"
    assert "kv_cache_quant_algo" not in json.loads((dest / "hf_quant_config.json").read_text())["quantization"]


def test_manifest_records_hashes_sizes_patches_and_version(checkpoint):
    dest = plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()
    raw = json.loads((dest / MANIFEST_NAME).read_text())

    assert raw["original"] == str(checkpoint)
    assert raw["servepilot_version"] == __version__
    assert raw["created"].endswith("+00:00")
    patched = {p["path"]: p for p in raw["patched"]}
    assert set(patched) == {"config.json", "hf_quant_config.json"}
    for rel, entry in patched.items():
        assert entry["original_sha256"] == hashlib.sha256((checkpoint / rel).read_bytes()).hexdigest()
        assert entry["patch"] == KV_SCHEME_PATCHES[rel]
        assert entry["overlay_sha256"] == hashlib.sha256((dest / rel).read_bytes()).hexdigest()
    linked = {f["path"]: f for f in raw["linked"]}
    shard = checkpoint / "model-00002-of-00002.safetensors"
    assert linked[shard.name]["size"] == shard.stat().st_size
    assert linked[shard.name]["mtime_ns"] == shard.stat().st_mtime_ns
    assert raw["dirs"] == ["tokenizer"]


def test_patched_json_keeps_the_original_layout(checkpoint):
    dest = plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()
    before = (checkpoint / "hf_quant_config.json").read_text()
    after = (dest / "hf_quant_config.json").read_text()
    removed = [line for line in before.splitlines() if line not in after.splitlines()]
    added = [line for line in after.splitlines() if line not in before.splitlines()]
    assert removed == ['        "kv_cache_quant_algo": "FP8",']
    assert added == []
    assert not after.endswith("\n")
    assert (dest / "config.json").read_text().endswith("\n")


def test_original_tree_is_untouched_by_build(checkpoint):
    before = inventory(checkpoint)
    plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()
    assert inventory(checkpoint) == before


@pytest.mark.parametrize("bad", ["../outside.json", "/etc/hostname", "tokenizer/../../x.json", ""])
def test_patch_path_escaping_the_checkpoint_is_refused(checkpoint, bad):
    with pytest.raises(PathEscape):
        plan_overlay(checkpoint, {bad: [{"op": "remove", "path": "/a"}]})


def test_symlink_out_of_a_plain_checkpoint_is_refused(checkpoint, tmp_path):
    secret = tmp_path / "elsewhere.bin"
    secret.write_bytes(b"not yours")
    os.symlink(secret, checkpoint / "model-extra.safetensors")
    with pytest.raises(PathEscape, match="outside the checkpoint"):
        plan_overlay(checkpoint, KV_SCHEME_PATCHES)


def test_symlink_inside_the_checkpoint_is_fine(checkpoint):
    os.symlink("config.json", checkpoint / "alias.json")
    dest = plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()
    assert (dest / "alias.json").is_symlink()


def test_destination_inside_the_original_is_refused(checkpoint):
    with pytest.raises(PathEscape, match="inside the original"):
        plan_overlay(checkpoint, KV_SCHEME_PATCHES, dest=checkpoint / "overlay")


def test_patch_that_does_not_apply_names_the_file(checkpoint):
    with pytest.raises(OverlayError, match="does not apply") as info:
        plan_overlay(checkpoint, {"config.json": [{"op": "remove", "path": "/no_such_key"}]})
    assert info.value.path == str(checkpoint / "config.json")


def test_patch_of_a_missing_file_or_invalid_json_is_refused(checkpoint):
    with pytest.raises(OverlayError, match="not a file of the checkpoint"):
        plan_overlay(checkpoint, {"absent.json": [{"op": "remove", "path": "/a"}]})
    (checkpoint / "broken.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        plan_overlay(checkpoint, {"broken.json": [{"op": "remove", "path": "/a"}]})


def test_patch_that_changes_nothing_is_refused(checkpoint):
    with pytest.raises(OverlayError, match="changes nothing"):
        plan_overlay(checkpoint, {"config.json": [{"op": "replace", "path": "/hidden_size", "value": 64}]})


def test_foreign_directory_at_destination_is_never_overwritten(checkpoint, tmp_path):
    foreign = tmp_path / "somebody-elses"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    before = inventory(foreign)
    with pytest.raises(NotAnOverlay):
        plan_overlay(checkpoint, KV_SCHEME_PATCHES, dest=foreign)
    with pytest.raises(NotAnOverlay):
        plan_overlay(checkpoint, KV_SCHEME_PATCHES, dest=foreign, replace=True)
    assert inventory(foreign) == before


def test_a_file_at_destination_is_refused(checkpoint, tmp_path):
    target = tmp_path / "a-file"
    target.write_text("x")
    with pytest.raises(OverlayError, match="not a servepilot overlay"):
        plan_overlay(checkpoint, KV_SCHEME_PATCHES, dest=target)


def test_identical_overlay_is_reused_and_a_different_one_needs_replace(checkpoint, tmp_path):
    dest = tmp_path / "ov"
    plan_overlay(checkpoint, KV_SCHEME_PATCHES, dest=dest).execute()
    first_manifest = (dest / MANIFEST_NAME).read_text()

    again = plan_overlay(checkpoint, KV_SCHEME_PATCHES, dest=dest)
    assert again.action == "reuse"
    assert again.execute() == dest
    assert (dest / MANIFEST_NAME).read_text() == first_manifest

    only_config = {"config.json": KV_SCHEME_PATCHES["config.json"]}
    with pytest.raises(OverlayError, match="--replace"):
        plan_overlay(checkpoint, only_config, dest=dest)
    plan = plan_overlay(checkpoint, only_config, dest=dest, replace=True)
    assert plan.action == "replace"
    plan.execute()
    assert read_manifest(dest).patches == only_config
    assert (dest / "hf_quant_config.json").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "ov"]  # no .old-/.partial- left


def test_replace_refuses_an_overlay_holding_foreign_files(checkpoint, tmp_path):
    dest = tmp_path / "ov"
    plan_overlay(checkpoint, KV_SCHEME_PATCHES, dest=dest).execute()
    (dest / "operator-notes.txt").write_text("do not lose me")
    with pytest.raises(OverlayError, match="operator-notes.txt"):
        plan_overlay(checkpoint, {"config.json": KV_SCHEME_PATCHES["config.json"]}, dest=dest, replace=True)
    assert (dest / "operator-notes.txt").read_text() == "do not lose me"


def test_unwritable_parent_puts_the_overlay_in_the_state_dir(checkpoint, monkeypatch, tmp_path):
    import servepilot.overlay.build as build

    real_access = os.access
    monkeypatch.setattr(build.os, "access", lambda p,
                        mode: False if Path(p) == checkpoint.parent else real_access(p, mode))
    plan = plan_overlay(checkpoint, KV_SCHEME_PATCHES)
    assert plan.placement == "state-dir"
    assert plan.dest.parent == Path(os.environ["SERVEPILOT_HOME"]) / "overlays"
    assert plan.execute().is_dir()
    assert sorted(p.name for p in checkpoint.parent.iterdir()) == ["ckpt"]


def test_an_overlay_cannot_be_the_original_of_another(checkpoint):
    dest = plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()
    with pytest.raises(OverlayError, match="itself a servepilot overlay"):
        plan_overlay(dest, {"config.json": [{"op": "add", "path": "/x", "value": 1}]})


def test_failure_mid_build_cleans_up_the_temporary_directory(checkpoint, monkeypatch):
    import servepilot.overlay.build as build

    calls = {"n": 0}
    real_symlink = os.symlink

    def failing_symlink(src, dst):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        real_symlink(src, dst)

    monkeypatch.setattr(build.os, "symlink", failing_symlink)
    plan = plan_overlay(checkpoint, KV_SCHEME_PATCHES)
    with pytest.raises(OSError, match="No space"):
        plan.execute()
    assert sorted(p.name for p in checkpoint.parent.iterdir()) == ["ckpt"]


def test_original_changed_between_plan_and_execute_is_caught(checkpoint):
    plan = plan_overlay(checkpoint, KV_SCHEME_PATCHES)
    (checkpoint / "config.json").write_text('{"changed": true}')
    with pytest.raises(OverlayError, match="between planning and building"):
        plan.execute()
    assert not plan.dest.exists()


def test_hf_cache_snapshot_works_as_an_original(tmp_path):
    from conftest import write_hf_snapshot

    snapshot = write_hf_snapshot(tmp_path / "hub")
    repo = snapshot.parent.parent
    before = inventory(repo)

    plan = plan_overlay(snapshot, KV_SCHEME_PATCHES)
    # a sibling in snapshots/ would look like another revision to huggingface_hub
    assert plan.placement == "state-dir"
    assert plan.hf_snapshot
    dest = plan.execute()

    assert inventory(repo) == before  # blobs, refs and snapshot links all untouched
    shard = dest / "model-00001-of-00002.safetensors"
    assert shard.read_bytes() == (snapshot / shard.name).read_bytes()
    assert "kv_cache_scheme" not in json.loads((dest / "config.json").read_text())["quantization_config"]
    assert overlay_status(dest).clean


def test_two_plain_checkpoints_get_distinct_default_overlays(tmp_path):
    a = write_checkpoint(tmp_path / "a" / "model")
    b = write_checkpoint(tmp_path / "b" / "model")
    da = plan_overlay(a, KV_SCHEME_PATCHES).execute()
    db = plan_overlay(b, KV_SCHEME_PATCHES).execute()
    assert da != db
    assert read_manifest(db).original == str(b)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"n": 1' + "0" * 5000 + "}"], ids=["deep", "huge-int"])
def test_patch_of_json_python_cannot_decode_is_one_checkpoint_error(checkpoint, text):
    # Deep nesting raises RecursionError and a 5000-digit integer a plain ValueError, not
    # JSONDecodeError: both must still be one typed error naming the file.
    (checkpoint / "odd.json").write_text(text)
    before = inventory(checkpoint)
    with pytest.raises(CheckpointError, match="not valid JSON") as info:
        plan_overlay(checkpoint, {"odd.json": [{"op": "remove", "path": "/a"}]})
    assert info.value.path is not None and "odd.json" in str(info.value.path)
    assert inventory(checkpoint) == before


@pytest.mark.parametrize("text", ["[" * 100_000, '{"n": 1' + "0" * 5000 + "}"], ids=["deep", "huge-int"])
def test_manifest_python_cannot_decode_is_an_overlay_error(checkpoint, text):
    overlay = plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()
    (overlay / MANIFEST_NAME).write_text(text)
    with pytest.raises(OverlayError, match="manifest is unreadable"):
        read_manifest(overlay)


def test_an_overlay_still_works_when_its_tree_is_mounted_elsewhere(checkpoint, tmp_path):
    # A container mounts the host's /models at /data: relative links follow, absolute ones
    # would point at a path that does not exist there.
    dest = plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()
    models = checkpoint.parent
    moved = tmp_path / "mounted-elsewhere"
    models.rename(moved)
    try:
        over = moved / dest.name
        assert (over / "model-00001-of-00002.safetensors").read_bytes() == \
            (moved / checkpoint.name / "model-00001-of-00002.safetensors").read_bytes()
        assert json.loads((over / "config.json").read_text())["quantization_config"]["quant_algo"] == "NVFP4"
    finally:
        moved.rename(models)


def test_an_overlay_with_absolute_links_stays_readable(checkpoint):
    # Overlays built before links were relative keep working: status and remove compare the
    # link text with what the manifest recorded, whichever form it has.
    from servepilot.overlay.remove import plan_removal

    dest = plan_overlay(checkpoint, KV_SCHEME_PATCHES).execute()
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    for entry in manifest["linked"]:
        absolute = str(checkpoint / entry["path"])
        (dest / entry["path"]).unlink()
        os.symlink(absolute, dest / entry["path"])
        entry["target"] = absolute
    (dest / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert overlay_status(dest).clean
    plan_removal(dest).execute()
    assert not dest.exists()
