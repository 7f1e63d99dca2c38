"""Weights per GPU, split as vLLM splits them (TP, EP, PP), from tensor headers or the architecture."""

from __future__ import annotations

from dataclasses import replace

import pytest
from planning_builders import deepseek_v3, llama_70b, tensor, with_tensors

from servepilot.checkpoint.spec import AttentionSpec, ModelSpec, MoESpec, QuantSpec, WeightsInfo
from servepilot.planning.weights import architecture_tensors, classify, split_weights


def tiny(**over) -> ModelSpec:
    kw = dict(path="/m/tiny", format="hf", hidden_size=64, intermediate_size=128, vocab_size=1000, dtype="bfloat16",
              attention=AttentionSpec(kind="gqa", num_layers=4, num_heads=4, num_kv_heads=1, head_dim=16))
    kw.update(over)
    return ModelSpec(**kw)


def tiny_tensors(layers=4, experts=0, vocab=1000):
    out = [tensor("model.embed_tokens.weight", vocab,
                  64), tensor("lm_head.weight", vocab, 64), tensor("model.norm.weight", 64)]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [tensor(p + "input_layernorm.weight", 64), tensor(p + "self_attn.q_proj.weight", 64, 64),
                tensor(p + "self_attn.k_proj.weight", 16, 64), tensor(p + "self_attn.v_proj.weight", 16, 64),
                tensor(p + "self_attn.o_proj.weight", 64, 64)]
        if experts:
            out.append(tensor(p + "mlp.gate.weight", experts, 64))
            out += [tensor(p + f"mlp.experts.{e}.down_proj.weight", 64, 128) for e in range(experts)]
        else:
            out += [tensor(p + "mlp.gate_proj.weight", 128, 64), tensor(p + "mlp.down_proj.weight", 64, 128)]
    return out


@pytest.mark.parametrize("name,kind", [
    ("model.layers.3.self_attn.q_proj.weight", "tp"),
    ("model.layers.3.self_attn.k_proj.weight", "kv"),
    ("model.layers.3.input_layernorm.weight", "replicated"),
    ("model.layers.3.mlp.gate.weight", "replicated"),  # MoE router
    ("model.layers.3.mlp.gate_proj.weight", "tp"),
    ("model.layers.3.self_attn.kv_a_proj_with_mqa.weight", "replicated"),
    ("model.layers.3.self_attn.kv_b_proj.weight", "tp"),
    ("model.layers.3.mlp.experts.17.up_proj.weight_scale", "expert"),
    ("model.layers.3.mlp.shared_experts.up_proj.weight", "tp"),
    ("model.layers.3.block_sparse_moe.experts.0.w1.weight", "expert"),
    ("model.embed_tokens.weight", "vocab"),
    ("lm_head.weight", "vocab"),
    ("model.layers.3.something_new.weight", "fallback"),
])
def test_classify(name, kind):
    assert classify(name) == kind


def test_exact_tp_split_from_headers():
    spec = with_tensors(tiny(), tiny_tensors())
    one = split_weights(spec, tp=1)
    two = split_weights(spec, tp=2)
    assert one.exact and one.source == "safetensors"
    q = 64 * 64 * 2
    norms = 64 * 2 * 5
    kv = 2 * 16 * 64 * 2  # one KV head: both ranks keep it whole
    vocab_rows = -(-1024 // 2)  # vocab 1000 padded to 1024, half per rank
    expected = (4 * (2 * q / 2 + kv + norms // 5 + (128 * 64 * 2 * 2) / 2)
                + 64 * 2 + 2 * vocab_rows / 1000 * 1000 * 64 * 2)
    assert two.per_stage[0] == pytest.approx(expected, rel=1e-9)
    assert two.per_stage[0] > one.per_stage[0] / 2  # replicated norms and KV heads


def test_expert_parallel_spreads_whole_experts_over_tp_times_dp():
    spec = with_tensors(tiny(moe=MoESpec(num_experts=8, experts_per_token=2)), tiny_tensors(experts=8))
    expert_bytes = 4 * 8 * 64 * 128 * 2
    tp_only = split_weights(spec, tp=2, dp=2)
    ep = split_weights(spec, tp=2, dp=2, expert_parallel=True)
    assert tp_only.by_kind["expert"] == pytest.approx(expert_bytes / 2)
    assert ep.by_kind["expert"] == pytest.approx(expert_bytes * 2 / 8)  # ceil(8 / 4) experts per rank


def test_vocab_rows_are_padded_to_64_per_rank():
    spec = with_tensors(tiny(), tiny_tensors())  # vocab 1000 -> 1024 rows
    one = split_weights(spec, tp=1)
    assert one.per_stage[0] - spec.weights.total_bytes == 2 * 24 * 64 * 2  # embed and lm_head, 24 rows each


def test_pipeline_stages_take_their_layers_and_the_ends():
    spec = with_tensors(tiny(vocab_size=1024), tiny_tensors(vocab=1024))
    split = split_weights(spec, pp=2)
    layer = sum(t.nbytes for t in tiny_tensors() if t.name.startswith("model.layers.0."))
    embed = 1024 * 64 * 2
    assert split.per_stage[0] == 2 * layer + embed
    assert split.per_stage[1] == 2 * layer + embed + 64 * 2  # lm_head and the final norm
    assert sum(split.per_stage) == spec.weights.total_bytes


def test_mtp_layers_are_not_loaded_and_unknown_names_are_listed():
    extra = [tensor("model.layers.4.self_attn.q_proj.weight", 64, 64), tensor("model.layers.0.mystery.weight", 8, 8)]
    spec = with_tensors(tiny(mtp_layers=1), tiny_tensors() + extra)
    split = split_weights(spec, tp=2)
    assert split.total_bytes == spec.weights.total_bytes - 64 * 64 * 2
    assert split.fallback_tensors == ("model.layers.0.mystery.weight",)
    assert any("MTP" in n for n in split.notes)


def test_index_total_is_split_in_architecture_proportions():
    total = 141_000_000_000
    spec = replace(llama_70b(), weights=WeightsInfo(source="index", total_bytes=total, shards=30))
    split = split_weights(spec, tp=8)
    assert split.source == "index" and not split.exact
    assert split.total_bytes == pytest.approx(total, rel=1e-6)
    # dense model: nearly everything is TP-split, norms are negligible
    assert split.per_stage[0] == pytest.approx(total / 8, rel=0.01)


def test_architecture_estimate_counts_parameters_and_quantized_bytes():
    dense = split_weights(llama_70b(), tp=1)
    assert dense.source == "estimate"
    assert dense.total_bytes / 2 == pytest.approx(70.55e9, rel=0.01)  # Llama-3.1-70B: 70.55 B parameters
    fp4 = replace(deepseek_v3(), quant=QuantSpec(method="modelopt", quant_algo="NVFP4"))
    bf16_bytes = sum(t.nbytes for t in architecture_tensors(deepseek_v3()))
    fp4_bytes = sum(t.nbytes for t in architecture_tensors(fp4))
    assert fp4_bytes / bf16_bytes == pytest.approx((0.5 + 1 / 16) / 2, rel=0.05)


def test_quant_ignore_list_keeps_those_modules_in_bf16():
    base = replace(deepseek_v3(), quant=QuantSpec(method="modelopt", quant_algo="NVFP4"))
    ignoring = replace(base, quant=QuantSpec(method="modelopt", quant_algo="NVFP4",
                                             ignore=("language_model.model.layers.*.self_attn*", "re:.*lm_head")))

    def attn_bytes(spec):
        return sum(t.nbytes for t in architecture_tensors(spec) if ".self_attn." in t.name and len(t.shape) > 1)

    assert attn_bytes(ignoring) == pytest.approx(attn_bytes(base) * 2 / (0.5 + 1 / 16), rel=1e-3)
    experts = [t.nbytes for t in architecture_tensors(ignoring) if ".experts." in t.name]
    assert experts == [t.nbytes for t in architecture_tensors(base) if ".experts." in t.name]
