"""Hub model ids that are not downloaded: headers by HTTP range from a fake Hub (real HTTP,
the real huggingface_hub client), never the weights; errors as one line; a cache by commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import LLAMA_TINY, llama_tiny_tensors, safetensors_bytes, write_gguf
from fake_hub import FakeRepo

from servepilot.checkpoint.inspect import inspect_path
from servepilot.checkpoint.remote import view_of
from servepilot.cli.main import main
from servepilot.errors import BadInput

REPO = "acme/tiny-llama"


def sharded_files(n_shards: int, *, big: int = 0) -> dict[str, bytes]:
    """config.json, an index and `n_shards` shards splitting LLAMA_TINY's tensors round-robin
    (padded with extra 1-D tensors so that every shard has one); with `big`, each shard also
    holds a tensor of that many BF16 zeros: the weights that must never be fetched."""
    tensors = list(llama_tiny_tensors().items())
    tensors += [(f"big.{i}.weight", ("BF16", [big])) for i in range(n_shards if big else 0)]
    while len(tensors) < n_shards:
        tensors.append((f"extra.{len(tensors)}.weight", ("BF16", [8])))
    groups: list[dict] = [{} for _ in range(n_shards)]
    for k, (name, spec) in enumerate(tensors):
        groups[k % n_shards][name] = spec
    files: dict[str, bytes] = {"config.json": json.dumps(LLAMA_TINY).encode()}
    weight_map: dict[str, str] = {}
    for i, group in enumerate(groups, start=1):
        shard = f"model-{i:05d}-of-{n_shards:05d}.safetensors"
        files[shard] = safetensors_bytes(group, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, shard))
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    files["tokenizer.json"] = b"{}" * 1000  # big and unread: must not be fetched
    return files


def test_sharded_repo_reads_one_range_per_shard_and_no_weights(fake_hub, tmp_path):
    files = sharded_files(4, big=2 * 2**20)
    fake_hub.add(REPO, FakeRepo(files))
    spec = inspect_path(REPO)
    assert spec.family == "llama" and spec.attention.num_kv_heads == 2
    assert spec.weights.source == "safetensors" and spec.weights.shards == 4
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    for name, data in files.items():
        (local_dir / name).write_bytes(data)
    local = inspect_path(local_dir)
    assert spec.weights.params_by_dtype == local.weights.params_by_dtype
    assert spec.weights.total_bytes == local.weights.total_bytes > 4 * 4 * 2**20
    shard_reads = fake_hub.file_requests(".safetensors")
    assert len(shard_reads) == 4 and all(r.range == "bytes=0-524287" for r in shard_reads)
    assert not fake_hub.file_requests("tokenizer.json")
    # The view holds each shard at its real size but only its header on disk.
    view = view_of(spec.path)
    assert view is not None and view.repo_id == REPO and view.commit == fake_hub.repos[REPO].commit
    shard = sorted(Path(spec.path).glob("*.safetensors"))[0]
    assert shard.stat().st_size == len(files[shard.name])
    assert shard.stat().st_blocks * 512 < 2**20  # a sparse file: the 4 MiB of weights is a hole


def test_119_shards_one_ranged_read_each_then_none_on_repeat(fake_hub, capsys):
    fake_hub.add(REPO, FakeRepo(sharded_files(119)))
    assert main(["inspect", REPO, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["model"]["weights"]["shards"] == 119
    shard_reads = fake_hub.file_requests(".safetensors")
    assert len(shard_reads) == 119 and all(r.range and r.range.startswith("bytes=0-") for r in shard_reads)
    assert len({r.path for r in shard_reads}) == 119
    small = [r for r in fake_hub.file_requests() if not r.path.endswith(".safetensors")]
    assert sorted(r.path.rsplit("/", 1)[1] for r in small) == ["config.json", "model.safetensors.index.json"]
    assert len(fake_hub.model_requests()) == 1 + 2 + 119  # repository info, two small files, 119 headers
    assert first["remote"]["requests"] == len(fake_hub.model_requests())

    fake_hub.reset_counts()
    assert main(["inspect", REPO, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert fake_hub.model_requests() == []
    assert again["model"]["weights"] == first["model"]["weights"] and again["remote"]["requests"] == 0


def test_a_header_past_the_first_range_takes_a_second_read(fake_hub):
    big = {f"model.layers.{i}.extra_tensor_with_a_long_name_{'x' * 200}": ("BF16", [4]) for i in range(3000)}
    files = {"config.json": json.dumps(LLAMA_TINY).encode(), "model.safetensors": safetensors_bytes(big)}
    assert len(files["model.safetensors"]) > 512 * 1024
    fake_hub.add(REPO, FakeRepo(files))
    spec = inspect_path(REPO)
    assert spec.weights.params_by_dtype == {"BF16": 4 * 3000}
    assert [r.range for r in fake_hub.file_requests(".safetensors")][0] == "bytes=0-524287"
    assert len(fake_hub.file_requests(".safetensors")) == 2


def test_revision_picks_the_commit_and_an_unknown_one_is_one_line(fake_hub, capsys):
    repo = fake_hub.add(REPO, FakeRepo(sharded_files(2)))
    assert main(["inspect", REPO, "--revision", repo.commit]) == 0
    assert repo.commit[:12] in capsys.readouterr().out
    assert main(["inspect", REPO, "--revision", "no-such-branch"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no revision 'no-such-branch'" in err


def test_gated_repo_without_token_is_one_line_exit_2_and_works_with_one(fake_hub, capsys, monkeypatch):
    repo = fake_hub.add("acme/gated", FakeRepo(sharded_files(2), gated=True))
    assert main(["inspect", "acme/gated"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gated" in err and "HF_TOKEN" in err
    monkeypatch.setenv("HF_TOKEN", repo.token)
    assert main(["inspect", "acme/gated"]) == 0


def test_private_or_missing_repo_is_one_line(fake_hub):
    fake_hub.add("acme/secret", FakeRepo(sharded_files(1), private=True))
    with pytest.raises(BadInput) as info:
        inspect_path("acme/secret")
    assert "private" in info.value.problem


def test_rate_limiting_is_one_line_with_the_retry_time(fake_hub):
    fake_hub.add(REPO, FakeRepo(sharded_files(2)))
    fake_hub.behaviour.rate_limited = True
    with pytest.raises(BadInput) as info:
        inspect_path(REPO)
    assert "HTTP 429" in info.value.problem and "retry after 7 s" in info.value.hint


def test_a_dropped_shard_is_a_problem_and_the_rest_still_counts(fake_hub, capsys):
    fake_hub.add(REPO, FakeRepo(sharded_files(3)))
    fake_hub.behaviour.drop_on = "00002-of-00003.safetensors"
    spec = inspect_path(REPO)
    assert spec.weights.shards == 2 and spec.family == "llama"
    assert any("00002-of-00003" in p and "header not read" in p for p in spec.problems)
    # The incomplete view is not reused: once the server behaves, a new call reads again.
    fake_hub.behaviour.drop_on = None
    fake_hub.reset_counts()
    assert inspect_path(REPO).weights.shards == 3 and fake_hub.model_requests()


def test_every_shard_dropped_is_one_line_exit_2(fake_hub, capsys):
    fake_hub.add(REPO, FakeRepo(sharded_files(2)))
    fake_hub.behaviour.drop_on = ".safetensors"
    assert main(["inspect", REPO]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "connection to" in err and fake_hub.url in err


def test_a_stalled_server_times_out_as_one_line(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "0.5")
    fake_hub.add(REPO, FakeRepo(sharded_files(1)))
    fake_hub.behaviour.stall_on = "config.json"
    with pytest.raises(BadInput) as info:
        inspect_path(REPO)
    assert "sent nothing for 0.5 s" in info.value.problem


def test_missing_config_file_is_a_404_line(fake_hub):
    files = sharded_files(2)
    index = json.loads(files["model.safetensors.index.json"])
    index["weight_map"]["ghost.weight"] = "model-00009-of-00009.safetensors"
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    fake_hub.add(REPO, FakeRepo(files))
    spec = inspect_path(REPO)  # a shard the index names but the repo lacks: reported, not fetched
    assert any("missing" in p and "00009" in p for p in spec.problems)
    assert not fake_hub.file_requests("00009-of-00009.safetensors")


def test_offline_mode_reads_only_what_was_read_before(fake_hub, monkeypatch):
    fake_hub.add(REPO, FakeRepo(sharded_files(2)))
    assert inspect_path(REPO).weights.shards == 2
    fake_hub.reset_counts()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert inspect_path(REPO).weights.shards == 2 and fake_hub.model_requests() == []
    with pytest.raises(BadInput) as info:
        inspect_path("acme/never-read")
    assert "hf download acme/never-read" in info.value.hint


def test_gguf_repo_header_grows_until_the_metadata_is_complete(fake_hub, tmp_path, monkeypatch):
    import servepilot.checkpoint.remote as remote

    (path,) = write_gguf(tmp_path / "tiny.gguf", n_tensors=5)
    data = path.read_bytes()
    monkeypatch.setattr(remote, "GGUF_FIRST", 64)  # force several growing reads on a small file
    fake_hub.add("acme/tiny-gguf", FakeRepo({"tiny.gguf": data + b"\0" * 2**20, "README.md": b"x"}))
    spec = inspect_path("acme/tiny-gguf")
    assert spec.format == "gguf" and spec.attention.num_kv_heads == 2
    local = inspect_path(path)
    assert spec.weights.params_by_dtype == local.weights.params_by_dtype
    reads = [r.range for r in fake_hub.file_requests(".gguf")]
    assert reads[0] == "bytes=0-63" and len(reads) >= 3
    last_end = int(reads[-1].split("-")[1])
    assert last_end < len(data) + 2**20 - 1  # never the whole file


def test_remote_id_in_deployment_notes_a_failure_and_keeps_the_rest(fake_hub, capsys):
    fake_hub.add(REPO, FakeRepo(sharded_files(2), gated=True))
    code = main(["deployment", "--gpu", "h100", "--engine-version", "0.16.0", "--json", "--",
                 "vllm", "serve", REPO])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert any("gated" in n for n in out["notes"])


def test_a_repo_of_several_gguf_quants_asks_for_one_then_reads_only_it(fake_hub, tmp_path, capsys):
    (q4,) = write_gguf(tmp_path / "tiny-Q4_K_M.gguf", n_tensors=3)
    (q8,) = write_gguf(tmp_path / "tiny-Q8_0.gguf", n_tensors=5)
    fake_hub.add("acme/tiny-GGUF", FakeRepo({q4.name: q4.read_bytes(), q8.name: q8.read_bytes(),
                                             "mmproj-tiny-f16.gguf": b"GGUF"}))
    with pytest.raises(BadInput) as info:
        inspect_path("acme/tiny-GGUF")
    assert "holds 2 GGUF models" in info.value.problem and "acme/tiny-GGUF:QUANT" in info.value.hint
    assert not fake_hub.file_requests(".gguf")  # refused before any header was read
    spec = inspect_path("acme/tiny-GGUF:Q8_0")
    assert spec.format == "gguf" and spec.weights.params_by_dtype == inspect_path(q8).weights.params_by_dtype
    assert {r.path.rsplit("/", 1)[1] for r in fake_hub.file_requests(".gguf")} == {q8.name}
    # llama.cpp's own -hf form in a command reads the same model.
    assert main(["deployment", "--gpu", "t4", "--json", "--", "llama-server", "-hf", "acme/tiny-GGUF:Q8_0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["spec"]["format"] == "gguf" and out["remote"]["repo_id"] == "acme/tiny-GGUF"


def test_a_cache_snapshot_with_only_config_json_reads_the_headers_remotely(fake_hub, tmp_path, monkeypatch):
    from test_inspect_hub_cli import _fake_hf_cache

    files = sharded_files(2)
    _fake_hf_cache(tmp_path / "hub", REPO, files={"config.json": files["config.json"]})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    fake_hub.add(REPO, FakeRepo(files))
    spec = inspect_path(REPO)
    assert spec.weights.source == "safetensors" and spec.weights.shards == 2
    assert view_of(spec.path) is not None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline, the local snapshot is all there is
    assert inspect_path(REPO).weights.source == "estimate"
