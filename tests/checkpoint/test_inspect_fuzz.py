"""Fuzzing the header readers: whatever the bytes, nothing escapes but HeaderError."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

from conftest import raw_safetensors, safetensors_bytes, write_gguf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servepilot.checkpoint.gguf_reader import read_gguf_file
from servepilot.checkpoint.safetensors import read_safetensors_summary
from servepilot.errors import HeaderError

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_scalars = st.none() | st.booleans() | st.integers(-(2**70),
                                                       2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(json_scalars,
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                           max_leaves=12)
dtypes = st.sampled_from(["F16", "BF16", "F32", "U8", "F8_E4M3", "F4", "I64", "BOOL", "X9", ""])
entries = st.fixed_dictionaries(
    {},
    optional={
        "dtype": dtypes | json_values,
        "shape": st.lists(st.integers(-3, 40), max_size=4) | json_values,
        "data_offsets": st.lists(st.integers(-5, 600), min_size=0, max_size=3) | json_values,
    },
)
headers = st.dictionaries(st.text(min_size=1, max_size=10), entries | json_values, max_size=6)


def _check_safetensors(data: bytes):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.safetensors"
        p.write_bytes(data)
        try:
            s = read_safetensors_summary(p)
        except HeaderError as exc:
            assert exc.path == str(p)
            return
        # accepted: then it must really tile the data section
        assert s.data_bytes == len(data) - 8 - struct.unpack("<Q", data[:8])[0]


@FUZZ
@given(st.binary(max_size=256))
def test_random_bytes(data):
    _check_safetensors(data)


@FUZZ
@given(headers, st.binary(max_size=600))
def test_structured_headers(header, data):
    _check_safetensors(raw_safetensors(header, data))


@FUZZ
@given(st.integers(0, 2**64 - 1), st.binary(max_size=64))
def test_any_declared_length(length, rest):
    _check_safetensors(struct.pack("<Q", length) + rest)


VALID = safetensors_bytes({"a": ("F16", [2, 3]), "b": ("F32", [4]), "c": ("U8", [5])}, metadata={"format": "pt"})


@FUZZ
@given(st.data())
def test_mutated_valid_file(data):
    blob = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    _check_safetensors(bytes(blob[:cut]) if data.draw(st.booleans()) else bytes(blob))


def test_header_json_with_huge_numbers_is_rejected_cleanly(tmp_path):
    header = {"w": {"dtype": "F16", "shape": [2**80, 2**80], "data_offsets": [0, 2**200]}}
    p = tmp_path / "h.safetensors"
    p.write_bytes(raw_safetensors(header))
    try:
        read_safetensors_summary(p)
    except HeaderError:
        pass
    else:
        raise AssertionError("accepted a header whose offsets run past the file")
    assert json.loads(json.dumps(header))  # the header itself is valid JSON


# ---------------------------------------------------------------- GGUF

_GGUF_CACHE: dict[str, bytes] = {}


def _valid_gguf() -> bytes:
    if "v" not in _GGUF_CACHE:
        with tempfile.TemporaryDirectory() as d:
            (p,) = write_gguf(Path(d) / "v.gguf", n_tensors=2)
            _GGUF_CACHE["v"] = p.read_bytes()
    return _GGUF_CACHE["v"]


def _check_gguf(data: bytes):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.gguf"
        p.write_bytes(data)
        try:
            read_gguf_file(p)
        except HeaderError as exc:
            assert exc.path == str(p)


@FUZZ
@given(st.binary(max_size=200))
def test_gguf_random_bytes_after_magic(data):
    _check_gguf(b"GGUF" + data)


@FUZZ
@given(st.data())
def test_gguf_mutated_valid_file(data):
    blob = bytearray(_valid_gguf())
    # mutate inside the header region (the first few hundred bytes), where lengths live
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(4, min(len(blob) - 1, 400)))
        blob[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(4, len(blob)))
    _check_gguf(bytes(blob[:cut]))


# ---------------------------------------------------------------- config.json

config_keys = st.sampled_from([
    "model_type", "architectures", "text_config", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "hidden_size", "head_dim", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "n_routed_experts",
    "num_experts_per_tok", "layer_types", "sliding_window", "sliding_window_pattern", "quantization_config",
    "auto_map", "vocab_size", "max_position_embeddings", "torch_dtype", "tie_word_embeddings", "index_topk",
])
quant_like = st.fixed_dictionaries({}, optional={
    "quant_method": st.sampled_from(["modelopt", "fp8", "mxfp4", "awq", "gptq", "compressed-tensors",
                                     "x"]) | json_values,
    "quant_algo": json_values, "config_groups": json_values, "kv_cache_scheme": json_values, "ignore": json_values,
    "weight_block_size": json_values, "producer": json_values, "quantization": json_values, "bits": json_values,
})
configs = st.dictionaries(config_keys, json_values | quant_like | st.integers(0, 100), max_size=12)


@FUZZ
@given(configs, configs)
def test_any_config_is_read_or_rejected_cleanly(tmp_path_factory, config, text):
    from servepilot.checkpoint.inspect import inspect_path
    from servepilot.errors import CheckpointError
    from servepilot.jsonable import to_jsonable

    root = tmp_path_factory.mktemp("cfg")
    config = dict(config, text_config=text) if text else config
    (root / "config.json").write_text(json.dumps(config))
    try:
        spec = inspect_path(root)
    except CheckpointError:
        return
    json.dumps(to_jsonable(spec))  # whatever was read serializes
