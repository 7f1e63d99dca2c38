"""safetensors headers: real files, hand-made files, hostile files; only header bytes read."""

from __future__ import annotations

import builtins
import json
import struct

import numpy as np
import pytest
from conftest import raw_safetensors, safetensors_bytes

from servepilot.checkpoint import safetensors as st
from servepilot.checkpoint.safetensors import (
    MAX_HEADER_BYTES,
    read_safetensors_summary,
    read_tensor_infos,
)
from servepilot.errors import HeaderError


def test_file_written_by_the_safetensors_library(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    arrays = {
        "a.weight": np.zeros((3, 5), dtype=np.float16),
        "b.bias": np.zeros((7,), dtype=np.float32),
        "c.idx": np.zeros((2, 2, 2), dtype=np.int64),
        "d.scalar": np.zeros((), dtype=np.float32),
    }
    path = tmp_path / "model.safetensors"
    save_file(arrays, str(path), metadata={"format": "np"})

    s = read_safetensors_summary(path)
    assert s.tensor_count == 4
    assert s.params_by_dtype == {"F16": 15, "F32": 8, "I64": 8}
    assert s.data_bytes == sum(a.nbytes for a in arrays.values())
    assert s.metadata == {"format": "np"}

    infos = read_tensor_infos(path, shard="model.safetensors")
    with safe_open(str(path), framework="numpy") as f:
        assert sorted(i.name for i in infos) == sorted(f.keys())
    by_name = {i.name: i for i in infos}
    assert by_name["a.weight"].shape == (3, 5) and by_name["a.weight"].dtype == "F16"
    assert by_name["c.idx"].nbytes == 64 and by_name["c.idx"].shard == "model.safetensors"


def test_hand_made_file_counts_elements_per_dtype(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(safetensors_bytes({"w": ("U8", [4, 8]), "s": ("F8_E4M3", [4, 2]), "g": ("F32", [])}))
    s = read_safetensors_summary(path)
    assert s.params_by_dtype == {"U8": 32, "F8_E4M3": 8, "F32": 1}
    assert s.data_bytes == 32 + 8 + 4


def test_only_header_bytes_are_read(tmp_path, monkeypatch):
    """A 2 GiB (sparse) file: the reader may read the 8-byte length and the header, nothing more."""
    path = tmp_path / "big.safetensors"
    n = 1024 * 1024 * 1024  # one 1Gi-element BF16 tensor = 2 GiB of data
    blob = safetensors_bytes({"w": ("BF16", [n])}, pad_data=False)
    with open(path, "wb") as f:
        f.write(blob)
        f.truncate(len(blob) + 2 * n)
    header_len = len(blob) - 8
    read_sizes: list[int] = []
    real_open = builtins.open

    class Counting:
        def __init__(self, f):
            self.f = f

        def read(self, size=-1):
            data = self.f.read(size)
            read_sizes.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(st, "open", lambda *a, **k: Counting(real_open(*a, **k)), raising=False)
    s = read_safetensors_summary(path)
    assert s.data_bytes == 2 * n
    assert sum(read_sizes) == 8 + header_len


def _write(tmp_path, data: bytes, name="bad.safetensors"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", "too short"),
        (b"\x01\x02\x03", "too short"),
        (struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}", "absurd"),
        (struct.pack("<Q", 2**63) + b"{}", "absurd"),
        (struct.pack("<Q", 100) + b"{}", "past the end"),
        (raw_safetensors(b"not json at all"), "not JSON"),
        (raw_safetensors(b"\xff\xfe{}"), "not JSON"),
        (raw_safetensors([1, 2, 3]), "not an object"),
        (raw_safetensors({"w": {"dtype": "F17", "shape": [1], "data_offsets": [0, 2]}}, b"\0\0"), "unknown dtype"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [1]}}), "lacks"),
        (raw_safetensors({"w": "F16"}), "not an object"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [-1,
                                                          -2], "data_offsets": [0, 4]}}, b"\0" * 4), "non-negative"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [True,
                                                          2], "data_offsets": [0, 4]}}, b"\0" * 4), "non-negative"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [1.5], "data_offsets": [0, 3]}}, b"\0" * 3), "non-negative"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": ["2"], "data_offsets": [0, 4]}}, b"\0" * 4), "non-negative"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 6]}}, b"\0" * 6), "needs 4 bytes"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 2), "truncated"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 9), "inconsistent"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [2], "data_offsets": [4, 0]}}, b"\0" * 4), "needs 4 bytes"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4, 8]}}, b"\0" * 4), "pair"),
        (raw_safetensors({"a": {"dtype": "F16", "shape": [2], "data_offsets": [2, 6]},
                          "b": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 6), "overlaps"),
        (raw_safetensors({"a": {"dtype": "F16", "shape": [2], "data_offsets": [6, 10]},
                          "b": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 10), "gap"),
        (raw_safetensors({"__metadata__": [1]}), "__metadata__"),
        (raw_safetensors({"w": {"dtype": "F16", "shape": [1] * 40, "data_offsets": [0, 2]}}, b"\0\0"), "at most 32"),
    ],
)
def test_hostile_files_raise_header_error_naming_the_file(tmp_path, data, words):
    p = _write(tmp_path, data)
    with pytest.raises(HeaderError) as info:
        read_safetensors_summary(p)
    assert info.value.path == str(p)
    assert words in info.value.problem


def test_out_of_order_offsets_that_tile_the_data_are_fine(tmp_path):
    header = {"b": {"dtype": "F16", "shape": [2], "data_offsets": [4, 8]},
              "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    p = _write(tmp_path, raw_safetensors(header, b"\0" * 8), "ok.safetensors")
    assert read_safetensors_summary(p).params_by_dtype == {"F16": 2, "F32": 1}
    assert [t.name for t in read_tensor_infos(p)] == ["a", "b"]


def test_missing_file_and_directory_are_header_errors(tmp_path):
    with pytest.raises(HeaderError, match="safetensors file does not exist"):
        read_safetensors_summary(tmp_path / "nope.safetensors")
    with pytest.raises(HeaderError, match="directory"):
        read_safetensors_summary(tmp_path)


def test_sub_byte_dtypes_use_their_bit_width(tmp_path):
    # F4 (e.g. MXFP4 packed) takes half a byte per element.
    header = {"w": {"dtype": "F4", "shape": [4, 4], "data_offsets": [0, 8]}}
    p = _write(tmp_path, raw_safetensors(header, b"\0" * 8), "f4.safetensors")
    assert read_safetensors_summary(p).params_by_dtype == {"F4": 16}
    assert json.loads(json.dumps(st.DTYPE_BITS))["F6_E2M3"] == 6


def test_a_negative_data_offset_is_named_as_such(tmp_path):
    # [-8, 0] spans the right byte count; it was reported as overlapping a tensor named ''.
    path = tmp_path / "neg.safetensors"
    header = {"b": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]},
              "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    path.write_bytes(raw_safetensors(header, b"\0" * 8))
    with pytest.raises(HeaderError, match="non-negative") as info:
        read_safetensors_summary(path)
    assert "'b'" in str(info.value)
