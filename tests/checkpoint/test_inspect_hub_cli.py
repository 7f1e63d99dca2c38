"""Model ids through a Hugging Face cache built in tmp (offline); the CLI's exit codes and JSON."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from conftest import LLAMA_TINY, safetensors_bytes

from servepilot.checkpoint.inspect import inspect_path
from servepilot.cli.main import main
from servepilot.errors import BadInput

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _fake_hf_cache(cache, repo_id="acme/tiny-llama", files=None):
    """The huggingface_hub cache layout: blobs by hash, snapshot files as relative symlinks."""
    files = files or {"config.json": json.dumps(LLAMA_TINY).encode(),
                      "model.safetensors": safetensors_bytes({"w": ("BF16", [8, 8])})}
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snap), snap / name)
    return snap


def test_model_id_resolves_through_hf_hub_cache(tmp_path, monkeypatch):
    snap = _fake_hf_cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = inspect_path("acme/tiny-llama")
    assert spec.path == str(snap)
    assert spec.family == "llama"
    assert spec.weights.source == "safetensors" and spec.weights.params_by_dtype == {"BF16": 64}


def test_cli_names_a_cached_model_by_its_id(tmp_path, monkeypatch, capsys):
    _fake_hf_cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["inspect", "acme/tiny-llama"]) == 0
    assert capsys.readouterr().out.startswith(f"acme/tiny-llama@{COMMIT[:12]}")


def test_unknown_model_id_is_bad_input_with_a_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInput) as info:
        inspect_path("acme/not-downloaded")
    assert "not-downloaded" in info.value.problem and "hf download acme/not-downloaded" in info.value.hint


def test_cli_json_schema_first_and_exit_0(sharded_llama, capsys):
    assert main(["inspect", str(sharded_llama), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out)[0] == "schema" and out["schema"] == "servepilot.inspect/1"
    assert out["model"]["family"] == "llama"
    assert out["model"]["weights"]["source"] == "safetensors"


def test_cli_text_is_short_and_names_the_essentials(sharded_llama, capsys):
    assert main(["inspect", str(sharded_llama)]) == 0
    out = capsys.readouterr().out
    for words in ("LlamaForCausalLM", "GQA", "2 KV heads", "safetensors headers", "none declared"):
        assert words in out
    assert len(out.splitlines()) <= 16


def test_cli_damaged_shard_prints_report_and_exits_2(sharded_llama, capsys):
    (sharded_llama / "model-00002-of-00002.safetensors").write_bytes(b"\x00" * 4)
    assert main(["inspect", str(sharded_llama)]) == 2
    out = capsys.readouterr().out
    assert "PROBLEM" in out and "model-00002-of-00002.safetensors" in out
    assert "LlamaForCausalLM" in out  # the rest is still reported


def test_cli_malformed_json_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"a": 1,\n "b": }')
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("servepilot: error: ") and "config.json: malformed JSON at line 2, column 7" in err[0]


def test_cli_missing_path_and_bad_gguf_exit_2(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    (tmp_path / "x.gguf").write_bytes(b"NOPE")
    assert main(["inspect", str(tmp_path / "x.gguf")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "not a GGUF file" in err
    assert "Traceback" not in err
