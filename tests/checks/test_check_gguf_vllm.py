"""check on vLLM serving one GGUF file: the weights per GPU are the GGUF's tensor types.

The model is DeepSeek-R1-Distill-Llama-70B's geometry (its config.json on the Hub:
hidden_size 8192, intermediate_size 28672, 80 layers, 64 heads, 8 KV heads, vocab 128256),
written as a GGUF header with the data region left as a sparse hole: only the header is read.
A Q8_0 conversion (llama.cpp's, 74.98 GB) is 17.5 GiB per GPU at TP 4; the same file in F16
is twice that and does not fit a 32 GiB V100.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

from servepilot.checks import run_checks
from servepilot.deployment import build_deployment

HIDDEN, FFN, LAYERS, HEADS, KV, VOCAB = 8192, 28672, 80, 64, 8, 128256
GiB = 1 << 30


def write_llama70b_gguf(path, qtype: GGMLQuantizationType):
    w = GGUFWriter(str(path), "llama")
    w.add_context_length(131072)
    w.add_block_count(LAYERS)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_vocab_size(VOCAB)
    kv = KV * HIDDEN // HEADS
    shapes = [("token_embd.weight", (VOCAB, HIDDEN)), ("output_norm.weight", (HIDDEN,)),
              ("output.weight", (VOCAB, HIDDEN))]
    for i in range(LAYERS):
        shapes += [(f"blk.{i}.attn_norm.weight", (HIDDEN,)), (f"blk.{i}.ffn_norm.weight", (HIDDEN,)),
                   (f"blk.{i}.attn_q.weight", (HIDDEN, HIDDEN)), (f"blk.{i}.attn_k.weight", (kv, HIDDEN)),
                   (f"blk.{i}.attn_v.weight", (kv, HIDDEN)), (f"blk.{i}.attn_output.weight", (HIDDEN, HIDDEN)),
                   (f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN)), (f"blk.{i}.ffn_up.weight", (FFN, HIDDEN)),
                   (f"blk.{i}.ffn_down.weight", (HIDDEN, FFN))]
    data = 0
    for name, shape in shapes:
        ttype = qtype if len(shape) == 2 else GGMLQuantizationType.F32
        block, size = GGML_QUANT_SIZES[ttype]
        nbytes = int(np.prod(shape)) // block * size
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=ttype)
        data += nbytes + 64
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size + data)  # a hole: nothing is written to disk
    return path


def _check(path, gpu: str | None):
    dep = build_deployment(command=["vllm", "serve", str(path), "--tensor-parallel-size", "4",
                                    "--max-model-len", "4096", "--dtype", "half"],
                           gpu=gpu, engine_version="0.6.6", probe=False)
    return run_checks(dep)


def _codes(result):
    return [f.code for f in result.findings]


def test_q8_0_70b_fits_four_32gib_gpus(tmp_path):
    result = _check(write_llama70b_gguf(tmp_path / "m-Q8_0.gguf", GGMLQuantizationType.Q8_0),
                    "v100-sxm2-32gb x4")
    assert "SP-MEM-001" not in _codes(result)
    assert result.plan["weights_source"] == "gguf"
    assert result.plan["weights_per_gpu_bytes"] / GiB == pytest.approx(17.46, abs=0.05)


def test_the_same_model_in_f16_does_not_fit(tmp_path):
    result = _check(write_llama70b_gguf(tmp_path / "m-F16.gguf", GGMLQuantizationType.F16),
                    "v100-sxm2-32gb x4")
    assert "SP-MEM-001" in _codes(result)


def test_without_a_gpu_the_memory_of_a_gguf_is_unknown(tmp_path):
    path = write_llama70b_gguf(tmp_path / "m-Q8_0.gguf", GGMLQuantizationType.Q8_0)
    result = _check(path, None)
    assert result.verdict == "unknown"
    assert "memory" in [u.fact for u in result.unknowns]
    assert "memory" not in [u.fact for u in _check(path, "v100-sxm2-32gb x4").unknowns]
