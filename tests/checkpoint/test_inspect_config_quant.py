"""config.json architecture reading and quantization declarations (with vLLM's precedence)."""

from __future__ import annotations

import pytest

from servepilot.checkpoint.config import read_architecture
from servepilot.checkpoint.quant import normalize_kv, read_quantization

MLA_TEXT = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
    "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "moe_intermediate_size": 2048, "vocab_size": 163840,
    "max_position_embeddings": 262144,
}


def test_nested_text_config_gives_mla_and_moe():
    cfg = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": MLA_TEXT}
    a = read_architecture(cfg)
    assert (a.model_type, a.text_model_type, a.family.family) == ("kimi_k25", "kimi_k2", "deepseek_v3")
    att = a.attention
    assert att.kind == "mla" and att.num_layers == 61 and att.head_dim == 192
    assert (att.kv_lora_rank, att.q_lora_rank, att.qk_rope_head_dim, att.v_head_dim) == (512, 1536, 64, 128)
    assert att.mla_head_size == 576
    moe = a.moe
    assert (moe.num_experts, moe.num_shared_experts, moe.experts_per_token, moe.first_dense_layers,
            moe.expert_intermediate_size) == (384, 1, 8, 1, 2048)
    assert a.notes == []


def test_unknown_family_says_so_and_does_not_assume_mla():
    cfg = dict(MLA_TEXT, model_type="foo", architectures=["FooForCausalLM"])
    a = read_architecture(cfg)
    assert a.family is None
    assert ("model_type 'foo' is not a family servepilot knows: "
            "attention geometry read from standard keys only") in a.notes
    assert a.attention.kind == "mha" and a.attention.kv_lora_rank is None
    assert any("kv_lora_rank is set" in n for n in a.notes)


def test_an_integral_float_is_still_an_integer():
    a = read_architecture(
        {
            "model_type": "llama",
            "num_hidden_layers": 2,
            "num_attention_heads": 32,
            "hidden_size": 4096.0,
            "vocab_size": 32000,
        }
    )
    assert a.hidden_size == 4096 and a.attention.head_dim == 128


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("num_hidden_layers", "32", "not a number"),
        ("num_hidden_layers", "sixty", "not a number"),
        ("vocab_size", True, "not a number"),
        ("num_hidden_layers", -5, "less than 1"),
        ("num_attention_heads", 0, "less than 1"),
        ("hidden_size", float("nan"), "not a whole number"),
        ("num_hidden_layers", 1_000_000, "beyond any real model"),
        ("num_local_experts", 10**9, "beyond any real model"),
        ("head_dim", 64.5, "not a whole number"),
    ],
)
def test_geometry_no_model_can_have_is_bad_input_not_a_note(key, value, words):
    # Once a note and a PASS (issue 12): every figure servepilot derives rests on these counts.
    from servepilot.checkpoint.layers import ConfigValueError

    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": 32,
        "hidden_size": 4096,
        "vocab_size": 32000,
        key: value,
    }
    with pytest.raises(ConfigValueError, match=words) as info:
        read_architecture(cfg)
    assert key in str(info.value)


def test_gpt_oss_layer_types_split_sliding_and_full():
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 64, "hidden_size": 2880, "sliding_window": 128, "num_local_experts": 128,
           "experts_per_token": 4, "intermediate_size": 2880,
           "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}
    att = read_architecture(cfg).attention
    assert att.kind == "hybrid" and att.layer_types == ("sliding", "full", "sliding", "full")
    assert (att.num_sliding_layers, att.num_full_layers, att.sliding_window) == (2, 2, 128)
    moe = read_architecture(cfg).moe
    assert (moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size) == (128, 4, 2880)


def test_qwen_sliding_window_switched_off_and_gemma3_pattern():
    qwen = {"model_type": "qwen3", "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
            "hidden_size": 512, "sliding_window": 4096, "use_sliding_window": False}
    att = read_architecture(qwen).attention
    assert att.kind == "mha" and att.layer_types == () and att.sliding_window is None
    gemma = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 6,
             "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_size": 2560,
             "sliding_window": 1024, "sliding_window_pattern": 6}}
    a = read_architecture(gemma)
    assert a.family.family == "gemma3"
    assert a.attention.layer_types == ("sliding",) * 5 + ("full",)
    assert a.attention.kind == "hybrid"


def test_mqa_and_gqa_kinds():
    base = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 512}
    assert read_architecture(dict(base, num_key_value_heads=1)).attention.kind == "mqa"
    assert read_architecture(dict(base, num_key_value_heads=2)).attention.kind == "gqa"
    assert read_architecture(base).attention.kind == "mha"
    assert read_architecture(base).attention.head_dim == 64


def test_sparse_mla_index_topk():
    cfg = dict(MLA_TEXT, model_type="glm_moe_dsa", index_topk=2048)
    att = read_architecture(cfg).attention
    assert att.kind == "mla" and att.sparse and att.index_topk == 2048


# ---------------------------------------------------------------- quantization

NVFP4_TOP = {"quant_method": "modelopt", "quant_algo": "NVFP4", "producer": {"name": "modelopt", "version": "0.41.0"},
             "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                           "input_activations": {"num_bits": 4, "type": "float", "group_size": 16}}},
             "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}, "ignore": ["lm_head"]}
HF_QUANT = {"producer": {"name": "modelopt", "version": "0.33.0"},
            "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                             "exclude_modules": ["lm_head", "model.layers.0.mlp.gate"]}}
CT_TEXT = {"quant_method": "compressed-tensors", "format": "pack-quantized",
           "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 32}}},
           "ignore": ["lm_head"], "kv_cache_scheme": None}


def test_top_level_wins_over_hf_quant_config_and_both_are_recorded():
    q, kv, notes = read_quantization({"quantization_config": NVFP4_TOP}, HF_QUANT)
    assert (q.method, q.quant_algo, q.bits, q.group_size) == ("modelopt", "NVFP4", 4, 16)
    assert q.declared_in == "config.json"
    assert [d.where for d in q.declarations] == ["config.json", "hf_quant_config.json"]
    assert q.producer == "modelopt 0.41.0"
    assert (kv.dtype, kv.where) == ("fp8", "config.json:quantization_config.kv_cache_scheme")
    assert kv.raw == {"dynamic": False, "num_bits": 8, "type": "float"}
    assert q.declarations[1].kv_cache.where == "hf_quant_config.json:quantization.kv_cache_quant_algo"
    assert notes == []  # both agree


def test_hf_quant_config_alone_is_what_the_engine_reads():
    q, kv, _ = read_quantization({"model_type": "qwen3_moe"}, HF_QUANT)
    assert q.declared_in == "hf_quant_config.json" and q.ignore == ("lm_head", "model.layers.0.mlp.gate")
    assert (kv.dtype, kv.where, kv.raw) == ("fp8", "hf_quant_config.json:quantization.kv_cache_quant_algo", "FP8")


def test_text_config_is_read_only_when_nothing_is_at_the_top():
    cfg = {"text_config": {"quantization_config": CT_TEXT}}
    q, kv, _ = read_quantization(cfg, None)
    assert q.declared_in == "config.json:text_config"
    assert (q.method, q.quant_algo, q.bits, q.group_size) == ("compressed-tensors", "W4A16", 4, 32)
    assert kv is None
    # hf_quant_config.json becomes the top-level quantization_config in vLLM: it wins.
    q2, kv2, notes = read_quantization(cfg, HF_QUANT)
    assert q2.declared_in == "hf_quant_config.json" and kv2.dtype == "fp8"
    assert any("config.json:text_config declares compressed-tensors W4A16 but vLLM reads hf_quant_config.json" in n
               for n in notes)


def test_disagreeing_kv_declarations_are_noted():
    top = dict(NVFP4_TOP)
    del top["kv_cache_scheme"]
    q, kv, notes = read_quantization({"quantization_config": top}, HF_QUANT)
    assert kv is None
    assert any("asks for a fp8 KV cache, but vLLM reads config.json, which declares none" in n for n in notes)


@pytest.mark.parametrize(
    "cfg, expected",
    [
        ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
         ("fp8", "FP8_BLOCK", 8, None, (128, 128))),
        ({"quant_method": "fp8", "activation_scheme": "static"}, ("fp8", "FP8", 8, None, None)),
        ({"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}, ("mxfp4", "MXFP4", 4, 32, None)),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, ("awq", "AWQ", 4, 128, None)),
        ({"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": False}, ("gptq", "GPTQ", 8, -1, None)),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
         ("bitsandbytes", "NF4", 4, None, None)),
        ({"load_in_8bit": True}, ("bitsandbytes", "INT8", 8, None, None)),
        ({"quant_method": "compressed_tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"},
          "input_activations": {"num_bits": 8, "type": "float"}}}}, ("compressed-tensors", "FP8", 8, None, None)),
        ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float",
          "group_size": 16}, "input_activations": {"num_bits": 4, "type": "float"}}}},
         ("compressed-tensors", "NVFP4", 4, 16, None)),
        ({"quant_method": "modelopt_fp4"}, ("modelopt", "NVFP4", 4, 16, None)),
        ({"quant_method": "hqq", "bits": 2}, ("hqq", None, 2, None, None)),
    ],
)
def test_methods(cfg, expected):
    q, _, _ = read_quantization({"quantization_config": cfg}, None)
    assert (q.method, q.quant_algo, q.bits, q.group_size, q.weight_block_size) == expected


def test_compressed_tensors_kv_cache_scheme():
    cfg = dict(CT_TEXT, kv_cache_scheme={"num_bits": 8, "type": "float", "strategy": "tensor"})
    q, kv, _ = read_quantization({"quantization_config": cfg}, None)
    assert (kv.dtype, kv.where) == ("fp8", "config.json:quantization_config.kv_cache_scheme")


@pytest.mark.parametrize(
    "raw, dtype",
    [({"dynamic": False, "num_bits": 8, "type": "float"}, "fp8"), ({"num_bits": 4, "type": "float"}, "nvfp4"),
     ("FP8", "fp8"), ("NVFP4", "nvfp4"), ({"num_bits": 8, "type": "int"}, "int8"), ({"x": 1}, "unknown"),
     ("weird", "weird"), (7, "unknown")],
)
def test_kv_normalization_keeps_raw(raw, dtype):
    kv = normalize_kv(raw, "somewhere")
    assert kv.dtype == dtype and kv.raw == raw and kv.where == "somewhere"


def test_non_object_quantization_config_is_noted():
    q, kv, notes = read_quantization({"quantization_config": "fp8"}, None)
    assert q is None and kv is None and "not an object" in notes[0]


@pytest.mark.parametrize("extra", [{}, {"hidden_size": 2}], ids=["absent", "too-small"])
def test_attention_without_a_usable_head_size_is_unknown_not_zero(extra):
    # head_dim 0 made the planner divide by a zero KV page size (ZeroDivisionError in
    # planning/kv.py); an attention geometry without a head size is unknown, and says why.
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, **extra}
    reading = read_architecture(cfg)
    assert reading.attention is None
    assert any("head_dim" in n for n in reading.notes), reading.notes
    assert not any("no usable num_hidden_layers" in n for n in reading.notes), reading.notes
