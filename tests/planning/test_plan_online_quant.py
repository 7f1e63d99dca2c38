"""`--quantization fp8` on a 16-bit checkpoint: vLLM quantizes while loading (online_fp8_load).

Resident weights are the FP8 size in every release; the load peak is the 16-bit size before
0.16 (the model is built with 16-bit weights) and the FP8 size plus one layer in 16 bits
from 0.16 (meta-device weights materialized per layer). Expected figures are computed here
from the tensors' shapes, not read from the planner.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from planning_builders import (  # noqa: F401
    deployment,
    gpus,
    llama_70b,
    no_resolver,
    tensor,
    with_tensors,
)
from test_memory_rules import run_all

from servepilot.checkpoint.spec import QuantSpec
from servepilot.planning import plan_deployment

H100 = dict(name="NVIDIA H100 80GB HBM3", key="h100-80gb", mib=81559, cc=(9, 0))
LAYERS = 80


def _llama_70b_tensors():
    """Llama-3-70B's tensors (config.json shapes), bfloat16."""
    h, inter, kv, vocab = 8192, 28672, 1024, 128256
    ts = [
        tensor("model.embed_tokens.weight", vocab, h),
        tensor("lm_head.weight", vocab, h),
        tensor("model.norm.weight", h),
    ]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        ts += [
            tensor(p + "input_layernorm.weight", h),
            tensor(p + "post_attention_layernorm.weight", h),
            tensor(p + "self_attn.q_proj.weight", h, h),
            tensor(p + "self_attn.k_proj.weight", kv, h),
            tensor(p + "self_attn.v_proj.weight", kv, h),
            tensor(p + "self_attn.o_proj.weight", h, h),
            tensor(p + "mlp.gate_proj.weight", inter, h),
            tensor(p + "mlp.up_proj.weight", inter, h),
            tensor(p + "mlp.down_proj.weight", h, inter),
        ]
    return ts


def _figures():
    ts = _llama_70b_tensors()
    stored = sum(t.nbytes for t in ts)
    linear = [
        t for t in ts if len(t.shape) == 2 and "embed" not in t.name and "lm_head" not in t.name
    ]
    fp8 = stored - sum(t.nbytes for t in linear) + sum(t.shape[0] * t.shape[1] for t in linear)
    one_layer_16bit = sum(t.nbytes for t in linear if t.name.startswith("model.layers.0."))
    return with_tensors(llama_70b(), ts), stored, fp8, one_layer_16bit


def _plan(spec, version, options=None):
    dep = deployment(
        spec,
        {"max_model_len": 4096, "quantization": "fp8", **(options or {})},
        gpu=gpus(1, **H100),
        version=version,
    )
    return dep, plan_deployment(dep)


def _weights(plan):
    return next(t.bytes for t in plan.terms if t.name == "weights")


@pytest.mark.parametrize(("version", "fp8_copies_kept"),
                         [("0.10.2", False), ("0.12.0", False), ("0.13.0", True), ("0.15.1", True)])
def test_before_0_16_the_load_holds_the_16_bit_weights_and_the_cache_is_sized_after_fp8(
    version, fp8_copies_kept
):
    spec, stored, fp8, _ = _figures()
    dep, plan = _plan(spec, version)
    assert _weights(plan) == pytest.approx(fp8, rel=0.002)  # vocab padding to 64 aside
    # 0.13 - 0.15 quantize each layer as it loads, but load_weights' params_dict keeps the
    # 16-bit tensors alive: their FP8 copies come on top (the embeddings are not copied)
    copies = stored - fp8 if fp8_copies_kept else 0  # half the 16-bit size of what is quantized
    assert plan.load_peak_bytes == pytest.approx(stored + copies, rel=0.002)
    # 141 GB of bfloat16 weights cannot be built on an 80 GB GPU, though 73 GB of FP8 would fit
    assert not plan.weights_fit and not plan.ok
    findings = run_all(dep)
    assert [f.code for f in findings] == ["SP-MEM-001"]
    assert "loading needs" in findings[0].title
    kinds = [r.kind for r in findings[0].remedies]
    assert "upgrade" in kinds and kinds[-1] == "hardware"


@pytest.mark.parametrize("version", ["0.16.0", "0.19.0"])
def test_from_0_16_layers_load_one_at_a_time_in_16_bits(version):
    spec, _, fp8, one_layer = _figures()
    dep, plan = _plan(spec, version)
    assert _weights(plan) == pytest.approx(fp8, rel=0.002)
    assert plan.load_peak_bytes == pytest.approx(fp8 + one_layer, rel=0.002)
    assert [f.code for f in run_all(dep) if f.code == "SP-MEM-001"] == []
    # the KV budget subtracts the FP8 weights, not the checkpoint's 16-bit size
    _, plain = _plan(spec, version, {"quantization": None})
    gained = plan.available_kv_bytes - plain.available_kv_bytes
    assert gained == pytest.approx(_weights(plain) - _weights(plan), rel=0.001)


def test_a_serialized_fp8_checkpoint_is_not_quantized_again():
    spec, stored, _, _ = _figures()
    quantized = replace(spec, quant=QuantSpec(method="fp8"))
    _, plan = _plan(quantized, "0.13.0")
    assert plan.load_peak_bytes is None
    assert _weights(plan) == pytest.approx(stored, rel=0.002)  # the tensors as stored


def test_0_33_refuses_online_fp8_and_says_so():
    spec, stored, _, _ = _figures()
    _, plan = _plan(spec, "0.34.0")
    assert plan.load_peak_bytes is None
    assert any("refuses --quantization fp8" in n for n in plan.notes)


def test_other_online_quantizations_are_named_as_not_modelled():
    spec, stored, _, _ = _figures()
    _, plan = _plan(spec, "0.13.0", {"quantization": "bitsandbytes"})
    assert plan.load_peak_bytes is None
    assert _weights(plan) == pytest.approx(stored, rel=0.002)
    assert any("bitsandbytes" in n and "not modelled" in n for n in plan.notes)


def test_the_check_summary_carries_the_load_peak():
    spec, stored, _, _ = _figures()
    _, plan = _plan(spec, "0.13.0")
    assert plan.summary()["load_peak_bytes"] == plan.load_peak_bytes
    _, plain = _plan(spec, "0.13.0", {"quantization": None})
    assert plain.summary()["load_peak_bytes"] is None


def test_experts_are_quantized_and_the_router_is_not():
    from servepilot.checkpoint.spec import MoESpec
    from servepilot.planning.weights import split_weights

    h, inter, experts = 2048, 768, 128  # Qwen3-30B-A3B's expert shapes, one layer
    ts = [tensor("model.layers.0.mlp.gate.weight", experts, h)]
    shapes = (("gate_proj", (inter, h)), ("up_proj", (inter, h)), ("down_proj", (h, inter)))
    ts += [
        tensor(f"model.layers.0.mlp.experts.{e}.{n}.weight", *shape)
        for e in range(experts)
        for n, shape in shapes
    ]
    spec = with_tensors(
        llama_70b(
            attention=replace(llama_70b().attention, num_layers=1),
            moe=MoESpec(num_experts=experts, experts_per_token=8, expert_intermediate_size=inter),
        ),
        ts,
    )
    router = experts * h * 2
    expert_elements = experts * 3 * inter * h
    split = split_weights(spec, online="fp8")
    assert split.per_stage == (router + expert_elements,)
    assert split.unquantized_per_stage == (router + 2 * expert_elements,)
    assert split.largest_layer_unquantized == (2 * expert_elements,)  # the router is not quantized


def _one_moe_layer():
    from servepilot.checkpoint.spec import MoESpec

    h, inter, experts = 2048, 768, 128  # Qwen3-30B-A3B's shapes, one layer
    shapes = (("gate_proj", (inter, h)), ("up_proj", (inter, h)), ("down_proj", (h, inter)))
    ts = [tensor("model.layers.0.self_attn.q_proj.weight", 4096, h),
          tensor("model.layers.0.mlp.gate.weight", experts, h)]
    ts += [tensor(f"model.layers.0.mlp.experts.{e}.{n}.weight", *shape)
           for e in range(experts) for n, shape in shapes]
    moe = MoESpec(num_experts=experts, experts_per_token=8, expert_intermediate_size=inter)
    spec = llama_70b(attention=replace(llama_70b().attention, num_layers=1), moe=moe)
    return with_tensors(spec, ts), experts * 3 * inter * h, (4096 + experts) * h * 2


@pytest.mark.parametrize("version", ["0.8.5", "0.13.0", "0.19.0"])
def test_experts_int8_quantizes_the_experts_in_place(version):
    spec, expert_elements, others = _one_moe_layer()
    dep = deployment(spec, {"max_model_len": 4096, "quantization": "experts_int8"},
                     gpu=gpus(1, **H100), version=version)
    plan = plan_deployment(dep)
    assert plan.load_peak_bytes is None  # no 16-bit copy is held while loading
    # experts at one byte per element; attention and the router stay 16-bit
    assert plan.rows[0].weights_bytes == pytest.approx(expert_elements + others, rel=0.001)


@pytest.mark.parametrize(
    ("version", "mode"),
    [("0.12.0", "full_16bit"), ("0.13.0", "full_16bit_and_fp8"), ("0.16.0", "layerwise")],
)
def test_the_plan_carries_the_load_mode_and_the_remedy_follows_the_key_not_the_prose(
    version, mode
):
    from servepilot.checks.rules.memory import _load_peak_finding

    spec, _, _, _ = _figures()
    dep, plan = _plan(spec, version)
    assert plan.load_peak_mode == mode
    reworded = replace(plan, load_peak_basis="reworded")
    kinds = [r.kind for r in _load_peak_finding(dep, reworded, _weights(plan)).remedies]
    assert ("upgrade" in kinds) is (mode != "layerwise")


@pytest.mark.parametrize("version", ["0.20.0", "0.32.0"])
def test_releases_not_read_make_no_claim_about_online_fp8_loading(version):
    spec, stored, _, _ = _figures()
    _, plan = _plan(spec, version)
    assert plan.load_peak_bytes is None and plan.load_fits is None
    assert _weights(plan) == pytest.approx(stored, rel=0.002)  # the checkpoint as stored
    assert any("not read" in n and "--quantization fp8" in n for n in plan.notes)


def test_experts_int8_of_releases_not_read_is_not_modelled():
    spec, _, _, _ = _figures()
    _, plan = _plan(spec, "0.20.0", {"quantization": "experts_int8"})
    assert any("experts_int8" in n and "not modelled" in n for n in plan.notes)


def test_the_upgrade_remedy_names_only_releases_read_as_layerwise():
    from packaging.specifiers import SpecifierSet

    from servepilot.planning.facts import fact

    spec, _, _, _ = _figures()
    dep, _ = _plan(spec, "0.13.0")
    finding = next(f for f in run_all(dep) if f.code == "SP-MEM-001")
    upgrade = next(r for r in finding.remedies if r.kind == "upgrade")
    wanted = SpecifierSet(upgrade.args["upgrade"]["specifier"])
    for version in ("0.15.1", "0.16.0", "0.19.0", "0.20.0", "0.32.0", "0.33.0"):
        layerwise = fact("vllm", "online_fp8_load", version).value == "layerwise"
        assert (version in wanted) is layerwise, version
