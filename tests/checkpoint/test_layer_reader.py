"""The layer reader: every key variant a family uses to say what each layer is.

Configs here are the families' key layouts (as their config.json files write them) at small
sizes; the zoo test (test_zoo.py) runs the real ones."""

from __future__ import annotations

from collections import Counter

import pytest

from servepilot.checkpoint.config import read_architecture

BASE = {
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 512,
    "vocab_size": 1000,
}


def kinds(cfg) -> list[str]:
    return [ly.kind for ly in read_architecture(cfg).layers]


def test_qwen3_next_every_fourth_layer_is_full_attention_the_rest_gated_delta_net():
    cfg = dict(
        BASE,
        model_type="qwen3_next",
        num_hidden_layers=8,
        full_attention_interval=4,
        num_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=64,
        linear_num_key_heads=4,
        linear_num_value_heads=8,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_conv_kernel_dim=4,
    )
    layers = read_architecture(cfg).layers
    assert [ly.mixer for ly in layers] == ["linear", "linear", "linear", "full"] * 2
    assert layers[0].state.kind == "gdn" and layers[0].state.num_heads == 8 and layers[3].q_gate
    assert all(ly.mlp == "moe" and ly.shared_intermediate == 64 for ly in layers)


def test_explicit_layer_types_win_and_an_unknown_kind_is_said():
    cfg = dict(
        BASE,
        model_type="qwen3_5_text",
        num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "conv"],
    )
    reading = read_architecture(cfg)
    assert [ly.mixer for ly in reading.layers][:3] == ["linear", "full", "linear"]
    assert any("'conv'" in n for n in reading.notes)


def test_nemotron_h_pattern_and_layers_block_type_without_num_hidden_layers():
    pattern = dict(
        BASE,
        model_type="nemotron_h",
        hybrid_override_pattern="M-M*-E",
        mamba_num_heads=8,
        mamba_head_dim=32,
        ssm_state_size=16,
        n_groups=2,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        moe_shared_expert_intermediate_size=128,
        mlp_hidden_act="relu2",
    )
    assert kinds(pattern) == ["mamba", "none", "mamba", "full", "none", "none+moe"]
    ultra = {k: v for k, v in pattern.items() if k != "hybrid_override_pattern"}
    ultra["layers_block_type"] = ["mamba", "moe", "attention", "moe"]
    reading = read_architecture(ultra)
    assert [ly.kind for ly in reading.layers] == ["mamba", "none+moe", "full", "none+moe"]
    assert reading.attention.num_layers == 4  # no num_hidden_layers: the list stands for it
    assert not reading.layers[1].gated_mlp  # relu2: up/down only


def test_mimo_hybrid_layer_pattern_and_moe_layer_freq_list():
    cfg = dict(
        BASE,
        model_type="mimo_v2_flash",
        num_hidden_layers=4,
        hybrid_layer_pattern=[0, 1, 1, 0],
        sliding_window=128,
        swa_num_attention_heads=16,
        swa_num_key_value_heads=8,
        swa_head_dim=64,
        moe_layer_freq=[0, 1, 1, 1],
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
    )
    layers = read_architecture(cfg).layers
    assert [ly.kind for ly in layers] == ["full", "sliding+moe", "sliding+moe", "full+moe"]
    assert (layers[1].num_heads, layers[1].num_kv_heads, layers[1].head_dim, layers[1].window) == (
        16,
        8,
        64,
        128,
    )
    assert (layers[0].num_heads, layers[0].num_kv_heads) == (8, 2)


def test_llama4_interleaved_moe_and_chunked_rope_layers_inside_text_config():
    text = dict(
        BASE,
        model_type="llama4_text",
        num_hidden_layers=8,
        interleave_moe_layer_step=2,
        num_local_experts=16,
        num_experts_per_tok=1,
        intermediate_size=128,
        intermediate_size_mlp=512,
        attention_chunk_size=8192,
    )
    cfg = {
        "model_type": "llama4",
        "architectures": ["Llama4ForConditionalGeneration"],
        "text_config": text,
    }
    layers = read_architecture(cfg).layers
    assert [ly.mlp for ly in layers] == ["dense", "moe"] * 4
    assert [ly.mixer for ly in layers] == [
        "chunked",
        "chunked",
        "chunked",
        "full",
    ] * 2  # every 4th NoPE
    assert layers[0].mlp_intermediate == 512 and layers[1].shared_intermediate == 128


def test_jamba_periods_and_minimax_attn_type_list():
    jamba = dict(
        BASE,
        model_type="jamba",
        num_hidden_layers=8,
        attn_layer_period=8,
        attn_layer_offset=4,
        expert_layer_period=2,
        expert_layer_offset=1,
        num_experts=4,
        num_experts_per_tok=2,
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_dt_rank=16,
    )
    assert Counter(kinds(jamba)) == Counter({"mamba": 3, "mamba+moe": 4, "full": 1})
    minimax = dict(BASE, model_type="minimax", num_hidden_layers=4, attn_type_list=[0, 0, 0, 1])
    layers = read_architecture(minimax).layers
    assert [ly.mixer for ly in layers] == ["linear", "linear", "linear", "full"] and layers[
        0
    ].state.kind == "lightning"


@pytest.mark.parametrize(
    "extra,moe_layers",
    [
        ({"first_k_dense_replace": 2, "moe_layer_freq": 1}, [2, 3, 4, 5]),
        ({"mlp_only_layers": [0, 5], "decoder_sparse_step": 1}, [1, 2, 3, 4]),
        ({"decoder_sparse_step": 2}, [1, 3, 5]),
        ({"moe_layer_start_index": 1, "moe_layer_interval": 2}, [1, 3, 5]),
    ],
)
def test_where_the_moe_layers_are(extra, moe_layers):
    cfg = dict(
        BASE,
        model_type="x",
        num_hidden_layers=6,
        n_routed_experts=8,
        num_experts_per_tok=2,
        **extra,
    )
    assert [
        i for i, ly in enumerate(read_architecture(cfg).layers) if ly.mlp == "moe"
    ] == moe_layers


@pytest.mark.parametrize(
    "key", ["num_experts_per_tok", "num_experts_per_token", "top_k_experts", "moe_k"]
)
def test_experts_per_token_key_variants(key):
    cfg = dict(BASE, model_type="x", num_hidden_layers=2, num_experts=8, **{key: 3})
    assert read_architecture(cfg).moe.experts_per_token == 3


def test_routed_expert_hidden_size_is_the_expert_width():
    cfg = dict(
        BASE,
        model_type="x",
        num_hidden_layers=2,
        n_routed_experts=8,
        num_experts_per_tok=2,
        routed_expert_hidden_size=96,
    )
    assert read_architecture(cfg).layers[0].expert_intermediate == 96


def test_nas_blocks_no_op_and_linear_replacements():
    blocks = [
        {"attention": {"n_heads_in_group": 4}, "ffn": {"ffn_mult": 1.5}},
        {"attention": {"no_op": True}, "ffn": {"ffn_mult": 1.0}},
        {"attention": {"replace_with_linear": True}, "ffn": {"no_op": True}},
        {"attention": {"n_heads_in_group": 8}, "ffn": {"replace_with_linear": True}},
    ]
    cfg = dict(
        BASE,
        model_type="nemotron-nas",
        num_hidden_layers=4,
        block_configs=blocks,
        num_key_value_heads=None,
    )
    layers = read_architecture(cfg).layers
    assert [(ly.mixer, ly.mlp) for ly in layers] == [
        ("full", "dense"),
        ("none", "dense"),
        ("linear_proj", "none"),
        ("full", "linear_proj"),
    ]
    assert (layers[0].num_kv_heads, layers[3].num_kv_heads) == (2, 1)
    # ffn_mult 1.5 x 256 x 2/3 = 256 (a multiple of 256); 1.0 -> 170 -> 256
    assert (layers[0].mlp_intermediate, layers[1].mlp_intermediate) == (256, 256)


def test_a_million_layers_is_refused_before_any_list_is_built():
    from servepilot.checkpoint.layers import ConfigValueError

    with pytest.raises(ConfigValueError, match="beyond any real model"):
        read_architecture(
            dict(BASE, model_type="nemotron_h", hybrid_override_pattern="M" * 1_000_000)
        )


def test_granite_4_hybrid_shared_mlp_is_the_dense_mlp_and_the_shared_expert():
    base = dict(BASE, model_type="granitemoehybrid", num_hidden_layers=4, intermediate_size=64,
                shared_intermediate_size=1024, layer_types=["mamba", "mamba", "mamba", "attention"],
                mamba_n_heads=8, mamba_d_head=64, mamba_d_state=128, mamba_n_groups=1, mamba_d_conv=4)
    dense = read_architecture(dict(base, num_local_experts=0)).layers
    assert [ly.mixer for ly in dense] == ["mamba"] * 3 + ["full"]
    assert {(ly.mlp, ly.mlp_intermediate) for ly in dense} == {("dense", 1024)}
    assert dense[0].state.kind == "mamba2" and dense[0].state.intermediate == 512
    moe = read_architecture(dict(base, num_local_experts=8, num_experts_per_tok=2)).layers
    assert {(ly.mlp, ly.expert_intermediate, ly.shared_intermediate) for ly in moe} == {("moe", 64, 1024)}


@pytest.mark.parametrize("n_inner,width", [(None, 4 * 96), (200, 200)])
def test_phi_msft_mlp_is_ungated_and_four_times_n_embd_when_n_inner_is_null(n_inner, width):
    cfg = {
        "model_type": "phi-msft",
        "architectures": ["PhiForCausalLM"],
        "n_embd": 96,
        "n_head": 4,
        "n_layer": 3,
        "n_inner": n_inner,
        "vocab_size": 1000,
    }
    arch = read_architecture(cfg)
    assert arch.intermediate_size == width
    assert [(ly.mlp, ly.mlp_intermediate, ly.gated_mlp) for ly in arch.layers] == [
        ("dense", width, False)
    ] * 3
