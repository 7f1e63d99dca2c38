"""SP-MEM-001/002/003: findings and ranked remedies read from the planner's MemoryPlan."""

from __future__ import annotations

from types import SimpleNamespace

from planning_builders import deployment, gpus, llama_70b, no_resolver  # noqa: F401

from servepilot.checks.rules import memory
from servepilot.planning import plan_deployment

L40S = dict(name="NVIDIA L40S", key="l40s", mib=46068, cc=(8, 9))


class NoResolver:
    def resolve_with(self, dep, **kw):
        raise LookupError("no resolver in this test")


def ctx_for(dep):
    return SimpleNamespace(plan=plan_deployment(dep), resolver=NoResolver())


def run_all(dep):
    ctx = ctx_for(dep)
    return [f for rule in (memory.weights_over_gpu, memory.no_kv_budget,
                           memory.kv_below_one_request) for f in rule(dep, ctx)]


def test_nothing_when_it_fits():
    assert run_all(deployment(llama_70b(), {"tensor_parallel_size": 8, "max_model_len": 32768})) == []


def test_weights_over_gpu_suggests_the_smallest_tp_that_fits():
    dep = deployment(llama_70b(), {"tensor_parallel_size": 1, "max_model_len": 8192}, gpu=gpus(4, **L40S))
    findings = run_all(dep)
    assert [f.code for f in findings] == ["SP-MEM-001"]
    f = findings[0]
    assert f.category == "oom_weights" and f.severity == "error"
    first = f.remedies[0]
    assert first.kind == "flag" and first.args == {"set": {"tensor_parallel_size": 4}, "unset": []}
    assert f.remedies[-1].kind == "hardware"


def test_no_kv_budget_is_oom_kv_cache():
    dep = deployment(llama_70b(), {"tensor_parallel_size": 4, "gpu_memory_utilization": 0.7}, gpu=gpus(4, **L40S))
    findings = run_all(dep)
    assert [f.code for f in findings] == ["SP-MEM-003"]
    assert findings[0].category == "oom_kv_cache"


def test_long_context_remedies_in_rank_order():
    dep = deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 131072}, gpu=gpus(8, **L40S))
    findings = run_all(dep)
    assert [f.code for f in findings] == ["SP-MEM-002"]
    f = findings[0]
    assert f.category == "max_model_len"
    changes = [r.change.split()[0] for r in f.remedies]
    assert changes[:3] == ["--tensor-parallel-size", "--kv-cache-dtype", "--max-model-len"]
    suggested = f.remedies[2].args["set"]["max_model_len"]
    assert suggested == ctx_for(dep).plan.max_model_len_fit
    again = deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": suggested}, gpu=gpus(8, **L40S))
    assert run_all(again) == []


def test_rules_are_registered():
    from servepilot.checks.registry import load_rules

    codes = {r.code: r.category for r in load_rules()}
    assert codes["SP-MEM-001"] == "oom_weights"
    assert codes["SP-MEM-002"] == "max_model_len"
    assert codes["SP-MEM-003"] == "oom_kv_cache"


def test_llamacpp_context_over_the_gpu_is_oom_kv_cache():
    from servepilot.checkpoint.spec import AttentionSpec, GGUFInfo, ModelSpec

    spec = ModelSpec(path="/m/x.gguf", format="gguf", hidden_size=4096, vocab_size=128256,
                     attention=AttentionSpec(kind="gqa", num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128),
                     gguf=GGUFInfo(architecture="llama", file_size=5 << 30, tensor_types={}, context_length=131072))
    one = gpus(1, name="NVIDIA GeForce RTX 4090", key="rtx-4090", mib=24564, cc=(8, 9))
    dep = deployment(spec, {"ctx_size": 262144, "n_gpu_layers": 99}, engine="llama.cpp", gpu=one)
    findings = run_all(dep)
    assert [f.code for f in findings] == ["SP-MEM-003"]
    first = findings[0].remedies[0]
    assert first.args["set"]["ctx_size"] < 262144
    assert run_all(deployment(spec, {"ctx_size": first.args["set"]["ctx_size"], "n_gpu_layers": 99},
                              engine="llama.cpp", gpu=one)) == []
