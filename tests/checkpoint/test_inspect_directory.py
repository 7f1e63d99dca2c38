"""Checkpoint directories: shards, index, damage, estimates, lone files."""

from __future__ import annotations

import json

import pytest
from conftest import LLAMA_TINY, llama_tiny_tensors, safetensors_bytes, write_json

from servepilot.checkpoint.estimate import estimate_param_bytes, estimate_params
from servepilot.checkpoint.inspect import inspect_config_file, inspect_path
from servepilot.errors import BadInput, CheckpointError, HeaderError


def _expected_elements():
    total = 0
    for _, shape in llama_tiny_tensors().values():
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def test_complete_checkpoint_reads_shard_headers(sharded_llama):
    spec = inspect_path(sharded_llama)
    w = spec.weights
    assert w.source == "safetensors" and not w.estimated
    assert w.shards == 2
    assert w.params_by_dtype == {"BF16": _expected_elements()}
    assert w.total_bytes == 2 * _expected_elements()
    assert w.index_total_bytes == w.total_bytes
    assert len(w.tensors) == len(llama_tiny_tensors())
    assert {t.shard for t in w.tensors} == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    assert spec.problems == ()
    assert spec.family == "llama" and spec.attention.kind == "gqa"


def test_architecture_estimate_matches_the_real_tensor_count(sharded_llama):
    """The estimate counts exactly the tensors a Llama checkpoint holds."""
    spec = inspect_path(sharded_llama)
    assert estimate_params(spec).total == _expected_elements()


def test_damaged_shard_is_listed_and_the_rest_reported(sharded_llama):
    bad = sharded_llama / "model-00002-of-00002.safetensors"
    data = bad.read_bytes()
    bad.write_bytes(data[:8] + b"{ this is not json" + data[26:])
    spec = inspect_path(sharded_llama)
    w = spec.weights
    assert w.shards == 1
    assert len(w.damaged) == 1 and w.damaged[0].startswith("model-00002-of-00002.safetensors: header is not JSON")
    assert any("damaged shard model-00002" in p for p in spec.problems)
    assert w.total_bytes < w.index_total_bytes
    # plan must not under-count what the engine will load
    assert estimate_param_bytes(spec) == w.index_total_bytes


def test_missing_shard_is_a_problem(sharded_llama):
    (sharded_llama / "model-00001-of-00002.safetensors").unlink()
    spec = inspect_path(sharded_llama)
    assert spec.weights.shards == 1
    assert spec.problems[0].startswith("model.safetensors.index.json names 1 shard(s) that are missing: model-00001")


def test_index_only_uses_total_size(tmp_path):
    write_json(tmp_path / "config.json", LLAMA_TINY)
    write_json(tmp_path / "model.safetensors.index.json",
               {"metadata": {"total_size": 123456}, "weight_map": {"a": "model-00001-of-00001.safetensors"}})
    spec = inspect_path(tmp_path)
    assert spec.weights.source == "index" and spec.weights.total_bytes == 123456
    assert spec.problems == ()


def test_config_only_gives_a_marked_estimate(tmp_path):
    write_json(tmp_path / "config.json", LLAMA_TINY)
    spec = inspect_path(tmp_path)
    assert spec.weights.source == "estimate" and spec.weights.estimated
    assert spec.weights.total_params == _expected_elements()
    assert spec.weights.total_bytes == 2 * _expected_elements()  # bf16


@pytest.mark.parametrize("target", ["../outside.safetensors", "/etc/passwd", "sub/../../x.safetensors"])
def test_index_pointing_outside_the_checkpoint_is_rejected(tmp_path, target):
    write_json(tmp_path / "config.json", LLAMA_TINY)
    idx = write_json(tmp_path / "model.safetensors.index.json",
                     {"metadata": {"total_size": 1}, "weight_map": {"w": target}})
    with pytest.raises(CheckpointError, match="outside the checkpoint") as info:
        inspect_path(tmp_path)
    assert info.value.path == str(idx)


@pytest.mark.parametrize("weight_map", [{"w": 5}, {"w": ["a"]}, [1], {"w": ""}])
def test_index_with_junk_weight_map_is_rejected(tmp_path, weight_map):
    write_json(tmp_path / "config.json", LLAMA_TINY)
    write_json(tmp_path / "model.safetensors.index.json", {"weight_map": weight_map})
    with pytest.raises(CheckpointError):
        inspect_path(tmp_path)


def test_malformed_config_names_file_line_and_column(tmp_path):
    (tmp_path / "config.json").write_text('{\n  "model_type": "llama",\n  "hidden_size": 64,,\n}\n')
    with pytest.raises(CheckpointError) as info:
        inspect_path(tmp_path)
    assert info.value.path == str(tmp_path / "config.json")
    assert "line 3, column 21" in info.value.problem  # the second comma


def test_config_that_is_not_an_object(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="expected a JSON object"):
        inspect_path(tmp_path)


def test_lone_safetensors_file(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(safetensors_bytes({"w": ("F32", [2, 3])}))
    spec = inspect_path(p)
    assert spec.format == "safetensors" and spec.weights.params_by_dtype == {"F32": 6}
    assert any("architecture unknown" in u for u in spec.unknown)


def test_lone_damaged_safetensors_file_raises(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(b"\xff" * 16)
    with pytest.raises(HeaderError, match="absurd"):
        inspect_path(p)


def test_directory_of_shards_without_config(tmp_path):
    (tmp_path / "a.safetensors").write_bytes(safetensors_bytes({"w": ("F16", [4])}))
    (tmp_path / "b.safetensors").write_bytes(b"\0" * 3)
    spec = inspect_path(tmp_path)
    assert spec.weights.shards == 1 and spec.weights.params_by_dtype == {"F16": 4}
    assert spec.weights.damaged and spec.weights.damaged[0].startswith("b.safetensors")


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(BadInput, match="not a checkpoint"):
        inspect_path(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(BadInput, match="not a checkpoint"):
        inspect_path(tmp_path / "notes.txt")
    with pytest.raises(BadInput, match="no such file"):
        inspect_path(tmp_path / "missing" / "dir")


def test_lone_config_file_and_hf_quant_beside_it(tmp_path):
    cfg = write_json(tmp_path / "config.json", LLAMA_TINY)
    write_json(tmp_path / "hf_quant_config.json", {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}})
    spec = inspect_config_file(cfg)
    assert spec.quant.method == "modelopt" and spec.quant.declared_in == "hf_quant_config.json"
    assert spec.kv_cache.dtype == "fp8"
    assert spec.weights.estimated


def test_lone_hf_quant_config_file_parses_as_quant_only(tmp_path):
    p = write_json(tmp_path / "x_hf_quant_config.json", {
        "producer": {"name": "modelopt", "version": "0.31.0"},
        "quantization": {"quant_algo": "NVFP4", "group_size": 16}})
    spec = inspect_config_file(p)
    assert spec.quant.quant_algo == "NVFP4" and spec.quant.group_size == 16
    assert spec.attention is None and "architecture unknown" in spec.unknown[0]


def test_custom_code_files_are_hashed(tmp_path):
    import hashlib

    cfg = dict(LLAMA_TINY, auto_map={"AutoConfig": "configuration_x.XConfig",
                                     "AutoModelForCausalLM": "modeling_x.XForCausalLM",
                                     "AutoTokenizer": ["tokenization_x.XTokenizer", None],
                                     "AutoModel": "other/repo--modeling_y.Y"})
    write_json(tmp_path / "config.json", cfg)
    (tmp_path / "configuration_x.py").write_text("# config code\n")
    (tmp_path / "tokenization_x.py").write_text("# tok\n")
    spec = inspect_path(tmp_path)
    files = {f.name: f for f in spec.custom_code.files}
    assert files["configuration_x.py"].present
    assert files["configuration_x.py"].sha256 == hashlib.sha256(b"# config code\n").hexdigest()
    assert not files["modeling_x.py"].present and files["modeling_x.py"].sha256 is None
    assert files["tokenization_x.py"].present
    assert not files["other/repo--modeling_y"].present
    assert any("another repository" in n for n in spec.notes)


def test_custom_code_module_outside_checkpoint_is_a_problem(tmp_path):
    write_json(tmp_path / "config.json", dict(LLAMA_TINY, auto_map={"AutoModel": "...evil.X"}))
    spec = inspect_path(tmp_path)
    assert any("outside the checkpoint" in p for p in spec.problems)


def test_spec_round_trips_to_json(sharded_llama):
    from servepilot.jsonable import to_jsonable

    obj = to_jsonable(inspect_path(sharded_llama))
    text = json.dumps(obj)
    assert "tensors" not in obj["weights"]  # the per-tensor table stays out of --json
    assert json.loads(text)["weights"]["source"] == "safetensors"


# ---------------------------------------------------------------- two-process reading

def _spec_summary(spec):
    w = spec.weights
    return (w.source, w.shards, w.total_bytes, w.params_by_dtype, w.damaged, w.index_total_bytes, spec.problems,
            tuple(w.tensors))


@pytest.fixture
def force_fork(monkeypatch):
    from servepilot.checkpoint import parallel

    forks = []
    real = parallel.Forked.__init__

    def counting_init(self, fn):
        forks.append(1)
        real(self, fn)

    monkeypatch.setattr(parallel, "MIN_SHARDS", 2)
    monkeypatch.setattr(parallel, "can_fork", lambda: True)
    monkeypatch.setattr(parallel.Forked, "__init__", counting_init)
    return forks


def test_forked_reading_gives_the_serial_answer(sharded_llama, force_fork):
    from servepilot.checkpoint import parallel

    bad = sharded_llama / "model-00002-of-00002.safetensors"
    bad.write_bytes(bad.read_bytes()[:-3])  # truncated: damaged
    forked = inspect_path(sharded_llama)
    assert force_fork, "the two-process path was not taken"
    parallel.MIN_SHARDS = 10**9
    serial = inspect_path(sharded_llama)
    assert _spec_summary(forked) == _spec_summary(serial)
    assert forked.weights.damaged and forked.weights.shards == 1


def test_forked_index_error_is_raised_in_the_parent(tmp_path, force_fork):
    write_json(tmp_path / "config.json", LLAMA_TINY)
    for name in ("a.safetensors", "b.safetensors"):
        (tmp_path / name).write_bytes(safetensors_bytes({"w": ("F16", [4])}))
    idx = write_json(tmp_path / "model.safetensors.index.json", {"weight_map": {"w": "../a.safetensors"}})
    with pytest.raises(CheckpointError, match="outside the checkpoint") as info:
        inspect_path(tmp_path)
    assert info.value.path == str(idx) and force_fork


def test_failed_child_falls_back_to_serial(sharded_llama, force_fork, monkeypatch):
    from servepilot.checkpoint import parallel

    def no_fork():
        raise OSError("fork refused")

    monkeypatch.setattr(parallel.os, "fork", no_fork)
    spec = inspect_path(sharded_llama)
    assert spec.weights.shards == 2 and spec.problems == ()


def test_estimate_param_bytes_prefers_headers_then_index_then_architecture(sharded_llama, tmp_path):
    from servepilot.checkpoint.spec import ModelSpec

    spec = inspect_path(sharded_llama)
    assert estimate_param_bytes(spec) == spec.weights.total_bytes
    for f in sharded_llama.glob("*.safetensors"):
        f.unlink()
    spec = inspect_path(sharded_llama)
    assert spec.weights.source == "index" and estimate_param_bytes(spec) == spec.weights.total_bytes
    (sharded_llama / "model.safetensors.index.json").unlink()
    spec = inspect_path(sharded_llama)
    assert spec.weights.source == "estimate" and estimate_param_bytes(spec) == 2 * _expected_elements()
    with pytest.raises(BadInput, match="cannot tell how much the weights weigh"):
        estimate_param_bytes(ModelSpec(path=str(tmp_path), format="hf"))


def test_quantized_estimate_uses_the_declared_bits(tmp_path):
    cfg = dict(LLAMA_TINY, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    write_json(tmp_path / "config.json", cfg)
    spec = inspect_path(tmp_path)
    est = estimate_params(spec)
    linear = est.attention + est.dense_mlp
    # FP8 linears: 1 byte each; embeddings, norms and lm_head stay BF16 (2 bytes)
    assert spec.weights.total_bytes == linear + 2 * (est.total - linear)


def test_fifo_is_refused_not_waited_on(tmp_path):
    import os

    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(HeaderError, match="not a regular file"):
        inspect_path(fifo)
    cfg = tmp_path / "cfgdir"
    cfg.mkdir()
    os.mkfifo(cfg / "config.json")
    with pytest.raises(CheckpointError, match="not a regular file"):
        inspect_path(cfg)


@pytest.mark.parametrize(
    "qcfg, bits",
    [({"quant_method": "bitsandbytes", "load_in_8bit": True}, 8.0),
     ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, 4.5),
     # vLLM's Mxfp4Config quantizes only the routed experts: a dense model's linears stay BF16
     ({"quant_method": "mxfp4"}, 16.0),
     # 4 bits + one FP16 scale and one packed 4-bit zero point per group of 128
     ({"quant_method": "awq", "bits": 4, "group_size": 128}, 4 + (16 + 4) / 128)],
)
def test_estimate_bits_per_quantized_weight(tmp_path, qcfg, bits):
    write_json(tmp_path / "config.json", dict(LLAMA_TINY, quantization_config=qcfg))
    spec = inspect_path(tmp_path)
    est = estimate_params(spec)
    quantized = est.attention + est.dense_mlp
    assert spec.weights.total_bytes == int(quantized * bits / 8) + 2 * (est.total - quantized)


def test_a_home_of_an_unknown_user_is_no_such_file_not_a_runtime_error(tmp_path, monkeypatch):
    # Path.expanduser raises RuntimeError for "~nosuchuser/..."; the shell leaves it as is.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match="no such file"):
        inspect_path("~servepilot-no-such-user/model")


def test_an_empty_path_is_refused_not_read_as_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_json(tmp_path / "config.json", LLAMA_TINY)
    with pytest.raises(BadInput, match="empty"):
        inspect_path("")
