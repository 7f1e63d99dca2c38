"""Weights per GPU of a GGUF file served by vLLM / SGLang: the GGUF's own tensor types, split by
the rule of the Hugging Face module each tensor is loaded into (gguf_loader.py@v0.10.2 maps the
names through gguf.get_tensor_name_map; GGUFLinearMethod keeps the quantized blocks)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType
from gguf.quants import quantize

from servepilot.checkpoint.inspect import inspect_path
from servepilot.planning.gguf_names import hf_name
from servepilot.planning.weights import split_weights

HIDDEN, FFN, VOCAB, HEADS, LAYERS = 256, 512, 1024, 8, 4


def write_llama_gguf(path, *, qtype=GGMLQuantizationType.Q8_0, kv_heads=2, tied=False,
                     extra=()) -> object:
    """A Llama-shaped GGUF as llama.cpp's converter lays it out: 2-D weights in `qtype`,
    norms in F32 (written with zeros: only the header is read)."""
    w = GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_block_count(LAYERS)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(kv_heads)
    w.add_vocab_size(VOCAB)
    w.add_file_type(LlamaFileType.MOSTLY_Q8_0)
    kv = kv_heads * HIDDEN // HEADS

    def tensor(name, shape):
        data = np.zeros(shape, dtype=np.float32)
        if len(shape) == 1 or qtype == GGMLQuantizationType.F32:
            w.add_tensor(name, data)
        elif qtype == GGMLQuantizationType.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    tensor("token_embd.weight", (VOCAB, HIDDEN))
    tensor("rope_freqs.weight", (HIDDEN // HEADS // 2,))
    for i in range(LAYERS):
        tensor(f"blk.{i}.attn_norm.weight", (HIDDEN,))
        tensor(f"blk.{i}.attn_q.weight", (HIDDEN, HIDDEN))
        tensor(f"blk.{i}.attn_k.weight", (kv, HIDDEN))
        tensor(f"blk.{i}.attn_v.weight", (kv, HIDDEN))
        tensor(f"blk.{i}.attn_output.weight", (HIDDEN, HIDDEN))
        tensor(f"blk.{i}.ffn_norm.weight", (HIDDEN,))
        tensor(f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN))
        tensor(f"blk.{i}.ffn_up.weight", (FFN, HIDDEN))
        tensor(f"blk.{i}.ffn_down.weight", (HIDDEN, FFN))
    for name, shape in extra:
        tensor(name, shape)
    tensor("output_norm.weight", (HIDDEN,))
    if not tied:
        tensor("output.weight", (VOCAB, HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return inspect_path(path)


def q8_bytes(rows, cols):
    """Q8_0: blocks of 32 elements, 32 int8 + one fp16 scale = 34 bytes (ggml-common.h)."""
    return rows * cols // 32 * 34


def test_names_follow_gguf_py_vocabulary():
    assert hf_name("blk.3.attn_k.weight") == "model.layers.3.self_attn.k_proj.weight"
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("output.weight") == "lm_head.weight"
    assert hf_name("blk.0.ffn_down_exps.weight") == "model.layers.0.mlp.experts.down_proj.weight"
    assert hf_name("rope_freqs.weight") is None  # no parameter takes it: not loaded
    # an unknown block tensor keeps its layer (its pipeline stage)
    assert hf_name("blk.7.new_thing.weight") == "model.layers.7.new_thing.weight"


def test_q8_0_gguf_at_tp4_is_the_quantized_blocks_split_by_the_module_rules(tmp_path):
    spec = write_llama_gguf(tmp_path / "m-Q8_0.gguf")
    split = split_weights(spec, tp=4, run_dtype="float16")
    assert split.source == "gguf"
    tp_linear = LAYERS * (q8_bytes(HIDDEN, HIDDEN) * 2 + q8_bytes(FFN, HIDDEN) * 3) / 4
    # 2 KV heads over 4 ranks: each rank holds one head, half of K and of V (replicated)
    kv = LAYERS * 2 * q8_bytes(2 * HIDDEN // HEADS, HIDDEN) / 2
    vocab = 2 * q8_bytes(VOCAB, HIDDEN) / 4  # 1024 rows: a multiple of 64, no padding
    norms = (2 * LAYERS + 1) * HIDDEN * 2  # F32 norms created in float16
    assert split.per_stage == (int(round(tp_linear + kv + vocab + norms)),)
    # the same shapes stored as F16 weigh close to twice as much: the type decides
    f16 = split_weights(write_llama_gguf(tmp_path / "m-F16.gguf", qtype=GGMLQuantizationType.F16),
                        tp=4, run_dtype="float16")
    assert f16.per_stage[0] / split.per_stage[0] == pytest.approx(2 / (34 / 32), rel=0.02)


def test_more_kv_heads_than_ranks_are_split_not_replicated(tmp_path):
    two = split_weights(write_llama_gguf(tmp_path / "a.gguf", kv_heads=2), tp=4)
    eight = split_weights(write_llama_gguf(tmp_path / "b.gguf", kv_heads=8), tp=4)
    assert two.by_kind["kv"] == LAYERS * 2 * q8_bytes(2 * HIDDEN // HEADS, HIDDEN) // 2
    assert eight.by_kind["kv"] == LAYERS * 2 * q8_bytes(8 * HIDDEN // HEADS, HIDDEN) // 4


def test_blocks_go_to_their_pipeline_stage_and_a_tied_gguf_copies_the_embedding(tmp_path):
    untied = split_weights(write_llama_gguf(tmp_path / "u.gguf"), pp=2)
    tied = split_weights(write_llama_gguf(tmp_path / "t.gguf", tied=True), pp=2)
    layer = q8_bytes(HIDDEN, HIDDEN) * 2 + q8_bytes(FFN, HIDDEN) * 3 + 2 * q8_bytes(64, HIDDEN)
    embedding = q8_bytes(VOCAB, HIDDEN)
    norm = HIDDEN * 4  # F32 kept: no 16-bit run dtype given
    assert untied.per_stage == (embedding + 2 * layer + 2 * 2 * norm,
                                2 * layer + 2 * 2 * norm + norm + embedding)
    # no output tensor: lm_head is the embedding, which the last stage holds a copy of
    assert tied.per_stage == untied.per_stage


def test_f32_norms_keep_four_bytes_without_a_16_bit_run_dtype(tmp_path):
    spec = write_llama_gguf(tmp_path / "m.gguf")
    half = split_weights(spec, run_dtype="bfloat16").per_stage[0]
    full = split_weights(spec).per_stage[0]
    assert full - half == (2 * LAYERS + 1) * HIDDEN * 2


def test_an_unknown_block_tensor_is_listed_and_stays_on_its_stage(tmp_path):
    spec = write_llama_gguf(tmp_path / "x.gguf", extra=[("blk.3.mystery.weight", (HIDDEN, HIDDEN))])
    split = split_weights(spec, pp=2)
    assert split.fallback_tensors == ("model.layers.3.mystery.weight",)
    plain = split_weights(write_llama_gguf(tmp_path / "y.gguf"), pp=2)
    assert split.per_stage[0] == plain.per_stage[0]
    assert split.per_stage[1] == plain.per_stage[1] + q8_bytes(HIDDEN, HIDDEN)


def test_gguf_experts_follow_expert_parallel_and_the_router_is_replicated(tmp_path):
    experts = 3
    extra = [(f"blk.0.ffn_{p}_exps.weight", (experts, FFN, HIDDEN)) for p in ("gate", "up")]
    extra += [("blk.0.ffn_down_exps.weight", (experts, HIDDEN, FFN)),
              ("blk.0.ffn_gate_inp.weight", (experts, HIDDEN))]
    spec = write_llama_gguf(tmp_path / "moe.gguf", extra=extra)
    assert spec.moe is None  # no expert_count key: experts split by TP inside each expert
    whole = 3 * experts * q8_bytes(FFN, HIDDEN)
    assert split_weights(spec, tp=2).by_kind["expert"] == whole // 2
    router = q8_bytes(experts, HIDDEN)
    norms = (2 * LAYERS + 1) * HIDDEN * 4
    assert split_weights(spec, tp=2).by_kind["replicated"] == router + norms
