"""Properties of the planner over generated architectures and commands (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_builders import deployment, gpus, no_resolver  # noqa: F401

from servepilot.checkpoint.spec import AttentionSpec, ModelSpec
from servepilot.errors import BadInput
from servepilot.planning import plan_deployment


@st.composite
def commands(draw):
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv * draw(st.sampled_from([1, 2, 4, 8]))
    layers = draw(st.integers(1, 96))
    hidden = heads * draw(st.sampled_from([64, 128]))
    spec = ModelSpec(path="/m/gen", format="hf", hidden_size=hidden, intermediate_size=hidden * 3,
                     vocab_size=draw(st.sampled_from([32000, 128256, 152064])), dtype="bfloat16",
                     attention=AttentionSpec(kind="gqa", num_layers=layers, num_heads=heads, num_kv_heads=kv,
                                             head_dim=hidden // heads),
                     config={"max_position_embeddings": 32768})
    opts = {"tensor_parallel_size": draw(st.sampled_from([1, 2, 4, 8])),
            "max_model_len": draw(st.integers(16, 131072)),
            "gpu_memory_utilization": draw(st.floats(0.3, 0.97))}
    if draw(st.booleans()):
        opts["kv_cache_memory_bytes"] = draw(st.integers(0, 60 << 30))
    version = draw(st.sampled_from(["0.5.2", "0.6.3", "0.10.1", "0.16.0", "0.21.0"]))
    return spec, opts, version


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commands())
def test_plan_invariants(case):
    spec, opts, version = case
    plan = plan_deployment(deployment(spec, opts, gpu=gpus(8), version=version))
    assert plan.kv_tokens >= 0
    if version == "0.21.0":  # reported as int(max_concurrency x max_model_len) from 0.21
        assert plan.kv_tokens == int(plan.max_concurrency * plan.max_model_len)
    else:  # blocks // groups x block_size before
        assert plan.kv_tokens % plan.block_size == 0
    assert plan.num_blocks >= 0
    if plan.available_kv_bytes > 0:
        assert plan.num_blocks * plan.page_size_bytes * spec.attention.num_layers <= plan.available_kv_bytes
    if plan.fits:
        assert plan.longest_context >= plan.max_model_len
    elif plan.max_model_len_fit is not None:
        assert plan.max_model_len_fit < plan.max_model_len
    for r in plan.rows:
        assert r.total_bytes == r.weights_bytes + r.runtime_bytes + r.kv_bytes + r.free_bytes
    fp8 = next(a for a in plan.alternatives if a.kv_cache_dtype == "fp8" and a.tp == plan.tp)
    assert fp8.kv_tokens >= plan.kv_tokens


def test_a_spec_without_attention_geometry_is_bad_input():
    spec = ModelSpec(path="/m/none", format="hf", hidden_size=64, vocab_size=100)
    with pytest.raises(BadInput):
        plan_deployment(deployment(spec, {}))
