"""GGUF files written with gguf.GGUFWriter; bad magic, truncation, splits."""

from __future__ import annotations

import struct

import pytest
from conftest import write_gguf

from servepilot.checkpoint.gguf_reader import read_gguf_file
from servepilot.checkpoint.gguf_spec import spec_from_gguf
from servepilot.checkpoint.inspect import inspect_path
from servepilot.cli.main import main
from servepilot.errors import BadInput, HeaderError


def test_single_file(tmp_path):
    (path,) = write_gguf(tmp_path / "tiny.gguf", n_tensors=3, context_length=4096)
    spec = inspect_path(path)
    assert spec.format == "gguf" and spec.family == "llama" and spec.model_type == "llama"
    g = spec.gguf
    assert (g.architecture, g.context_length, g.block_count, g.head_count, g.head_count_kv) == ("llama", 4096, 2, 4, 2)
    assert g.embedding_length == 32 and g.file_type == "MOSTLY_F16"
    assert g.tensor_types == {"F16": 2, "F32": 1}
    assert g.file_size == path.stat().st_size and g.split_files == ()
    assert spec.vocab_size == 100  # from the token table's length
    assert spec.weights.source == "gguf"
    assert spec.weights.total_bytes == 2 * 32 * 32 * 2 + 32 * 32 * 4
    assert spec.weights.params_by_dtype == {"F16": 2048, "F32": 1024}
    assert spec.attention.kind == "gqa" and spec.attention.head_dim == 8
    assert spec.quant.method == "gguf" and spec.quant.quant_algo == "MOSTLY_F16"
    assert [t.name for t in spec.weights.tensors] == [f"blk.{i}.attn_q.weight" for i in range(3)]


def test_split_files_are_combined(tmp_path):
    files = write_gguf(tmp_path / "big.gguf", n_tensors=4, split_max_tensors=2)
    assert [f.name for f in files] == ["big-00001-of-00002.gguf", "big-00002-of-00002.gguf"]
    spec = inspect_path(files[1])  # any split names the whole set
    assert spec.gguf.split_files == tuple(f.name for f in files)
    assert spec.gguf.file_size == sum(f.stat().st_size for f in files)
    assert sum(spec.gguf.tensor_types.values()) == 4 and spec.weights.shards == 2
    files[1].unlink()
    spec = inspect_path(files[0])
    assert spec.problems and "missing 1 file(s): big-00002-of-00002.gguf" in spec.problems[0]


def test_directory_with_one_gguf_model(tmp_path):
    write_gguf(tmp_path / "m.gguf")
    (tmp_path / "mmproj-m.gguf").write_bytes(b"GGUF")  # projector files are not the model
    assert inspect_path(tmp_path).format == "gguf"
    write_gguf(tmp_path / "other.gguf")
    with pytest.raises(BadInput, match="2 GGUF models"):
        inspect_path(tmp_path)


def test_bad_magic(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"GGML" + b"\0" * 100)
    with pytest.raises(HeaderError, match="magic") as info:
        read_gguf_file(p)
    assert info.value.path == str(p)


@pytest.mark.parametrize("keep", [4, 10, 24, 60, 200, -100, -1])
def test_truncated_file(tmp_path, keep):
    (path,) = write_gguf(tmp_path / "t.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    with pytest.raises(HeaderError) as info:
        read_gguf_file(path)
    assert info.value.path == str(path)


def test_hostile_array_length_is_refused_quickly(tmp_path):
    # magic, version 3, 0 tensors, 1 kv: key "a", type ARRAY(9) of UINT8(0) with 2**62 elements
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, 0, 2**62)
    p = tmp_path / "h.gguf"
    p.write_bytes(body + b"\0" * 64)
    with pytest.raises(HeaderError, match="truncated or corrupt"):
        read_gguf_file(p)


def test_empty_file(tmp_path):
    p = tmp_path / "e.gguf"
    p.write_bytes(b"")
    with pytest.raises(HeaderError):
        read_gguf_file(p)


def test_tensor_payload_is_not_read(tmp_path):
    """A GGUF whose 4 GiB of tensor data is a hole in a sparse file: reading its header must
    not touch the payload (GGUFReader memory-maps; only header pages become resident)."""
    import resource

    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "sparse.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    rows = 1 << 20
    for i in range(4):  # 4 x 1 GiB of F32
        w.add_tensor_info(f"blk.{i}.ffn_up.weight", (rows, 256), np.dtype(np.float32), rows * 256 * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with open(path, "r+b") as f:
        f.seek(0, 2)
        header_end = f.tell()
        f.truncate(header_end + 32 + 4 * rows * 256 * 4)  # alignment slack + the hole

    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    spec = inspect_path(path)
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert spec.weights.total_bytes == 4 * rows * 256 * 4
    assert spec.gguf.tensor_types == {"F32": 4}
    assert peak_after - peak_before < 256 * 1024  # far below the 4 GiB a read would need


def test_deepseek2_gguf_reads_mla_geometry(tmp_path):
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "ds.gguf"
    w = GGUFWriter(str(path), "deepseek2")
    w.add_block_count(61)
    w.add_context_length(163840)
    w.add_embedding_length(7168)
    w.add_head_count(128)
    w.add_head_count_kv(128)
    w.add_key_length(192)
    w.add_value_length(128)
    w.add_uint32("deepseek2.attention.kv_lora_rank", 512)
    w.add_uint32("deepseek2.attention.q_lora_rank", 1536)
    w.add_uint32("deepseek2.rope.dimension_count", 64)
    w.add_expert_count(256)
    w.add_expert_used_count(8)
    w.add_expert_shared_count(1)
    w.add_leading_dense_block_count(3)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    spec = inspect_path(path)
    a = spec.attention
    assert spec.family == "deepseek_v3" and a.kind == "mla"
    assert (a.kv_lora_rank, a.q_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim,
            a.v_head_dim) == (512, 1536, 64, 128, 128)
    assert a.mla_head_size == 576
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.num_shared_experts,
            spec.moe.first_dense_layers) == (256, 8, 1, 3)


def test_unknown_gguf_architecture_says_so(tmp_path):
    (path,) = write_gguf(tmp_path / "x.gguf", arch="mystery")
    spec = inspect_path(path)
    assert spec.family is None
    assert "GGUF architecture 'mystery' is not a family servepilot knows" in spec.unknown[0]
    assert spec.attention.num_layers == 2  # still read from the standard keys


def test_long_arrays_are_skipped_with_their_length_kept(tmp_path):
    """Token tables are walked by length, not decoded one numpy slice at a time."""
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "vocab.gguf"
    w = GGUFWriter(str(path), "qwen3")
    w.add_block_count(2)
    w.add_head_count(4)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(50_000)])
    w.add_array("tokenizer.ggml.token_type", [1] * 50_000)
    w.add_array("qwen3.small", [3, 1, 4])
    w.add_uint32("qwen3.context_length", 40960)  # read after the long arrays: offsets stayed right
    w.add_tensor("x", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = read_gguf_file(path)
    assert f.metadata["tokenizer.ggml.tokens#len"] == 50_000
    assert f.metadata["tokenizer.ggml.token_type#len"] == 50_000
    assert f.metadata["qwen3.small"] == [3, 1, 4]
    assert f.metadata["qwen3.context_length"] == 40960
    assert f.tensor_count == 1

    data = path.read_bytes()
    cut = data.index(b"tok40000")  # inside the token table
    path.write_bytes(data[:cut])
    with pytest.raises(HeaderError, match="truncated"):
        read_gguf_file(path)


@pytest.mark.parametrize("name", ["m-00001-of-00000.gguf", "m-00003-of-00002.gguf", "m-00000-of-00002.gguf"])
def test_split_name_whose_part_number_is_impossible_is_one_header_error(tmp_path, name, capsys):
    # "part 1 of 0" left the list of splits empty (IndexError); "part 3 of 2" read the
    # other files and never the one named.
    (path,) = write_gguf(tmp_path / "single.gguf")
    path.rename(tmp_path / name)
    with pytest.raises(HeaderError, match="part"):
        spec_from_gguf(tmp_path / name)
    assert main(["inspect", str(tmp_path / name)]) == 2
    assert "Traceback" not in capsys.readouterr().err
