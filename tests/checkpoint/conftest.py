"""Builders for checkpoints in tmp dirs: configs, safetensors files by hand, GGUF files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

BYTES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "I64": 8}


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]], *, metadata: dict | None = None,
                      pad_data: bool = True) -> bytes:
    """A well-formed safetensors file (zero-filled data) built by hand, tensors in order."""
    header: dict = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        size = n * BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    return struct.pack("<Q", len(blob)) + blob + (b"\0" * offset if pad_data else b"")


def raw_safetensors(header_obj, data: bytes = b"", *, length: int | None = None) -> bytes:
    """A possibly hostile file: any JSON value (or raw bytes) as header, any declared length."""
    blob = header_obj if isinstance(header_obj, bytes) else json.dumps(header_obj).encode()
    n = len(blob) if length is None else length
    return struct.pack("<Q", n) + blob + data


LLAMA_TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "max_position_embeddings": 256,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def llama_tiny_tensors() -> dict[str, tuple[str, list[int]]]:
    """Every tensor of LLAMA_TINY, as a real checkpoint would hold them (BF16)."""
    h, inter, kv = 64, 128, 2 * 16
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [100, h])}
    for i in range(2):
        p = f"model.layers.{i}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", [h])
        t[f"{p}.post_attention_layernorm.weight"] = ("BF16", [h])
        t[f"{p}.self_attn.q_proj.weight"] = ("BF16", [h, h])
        t[f"{p}.self_attn.k_proj.weight"] = ("BF16", [kv, h])
        t[f"{p}.self_attn.v_proj.weight"] = ("BF16", [kv, h])
        t[f"{p}.self_attn.o_proj.weight"] = ("BF16", [h, h])
        t[f"{p}.mlp.gate_proj.weight"] = ("BF16", [inter, h])
        t[f"{p}.mlp.up_proj.weight"] = ("BF16", [inter, h])
        t[f"{p}.mlp.down_proj.weight"] = ("BF16", [h, inter])
    t["model.norm.weight"] = ("BF16", [h])
    t["lm_head.weight"] = ("BF16", [100, h])
    return t


def write_json(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2))
    return path


@pytest.fixture
def sharded_llama(tmp_path) -> Path:
    """A tiny complete Llama checkpoint: config, index and two shards written by hand."""
    root = tmp_path / "llama-tiny"
    root.mkdir()
    write_json(root / "config.json", LLAMA_TINY)
    tensors = list(llama_tiny_tensors().items())
    half = len(tensors) // 2
    weight_map, total = {}, 0
    for i, part in enumerate((tensors[:half], tensors[half:]), start=1):
        name = f"model-{i:05d}-of-00002.safetensors"
        blob = safetensors_bytes(dict(part), metadata={"format": "pt"})
        (root / name).write_bytes(blob)
        for t, (dtype, shape) in part:
            weight_map[t] = name
            n = 1
            for d in shape:
                n *= d
            total += n * BYTES[dtype]
    write_json(root / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    return root


def write_gguf(path: Path, *, arch: str = "llama", n_tensors: int = 3, split_max_tensors: int = 0,
               context_length: int = 2048) -> list[Path]:
    """A small GGUF model written with gguf.GGUFWriter; returns the file(s) written."""
    import numpy as np
    from gguf import GGUFWriter, LlamaFileType

    w = GGUFWriter(str(path), arch, split_max_tensors=split_max_tensors)
    w.add_context_length(context_length)
    w.add_block_count(2)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_file_type(LlamaFileType.MOSTLY_F16)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(100)])
    for i in range(n_tensors):
        dtype = np.float16 if i % 2 == 0 else np.float32
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((32, 32), dtype=dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if split_max_tensors:
        return sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))
    return [path]


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A fake Hub on 127.0.0.1 that huggingface_hub (and so servepilot) talks to."""
    import huggingface_hub.constants as hf_constants
    from fake_hub import FakeHub

    hub = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # read once at import
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved token, an empty cache
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "3")
    yield hub
    hub.stop()
