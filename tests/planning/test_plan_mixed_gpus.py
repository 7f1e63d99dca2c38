"""Pipeline stages on GPUs of different sizes, VLLM_PP_LAYER_PARTITION, and the release's
max_model_len check with pipeline parallelism (pp_max_model_len_check).

Each stage's KV budget comes from its own GPU (every worker measures its own memory); the
engine then gives every worker the smallest block count. 0.14 - 0.16 check one request of
the whole model against the smallest worker's budget; 0.13 and 0.18+ check each worker's own
layers. Expected figures are worked out here from the plan's inputs (terms, rows).
"""

from __future__ import annotations

import math

import pytest
from planning_builders import GiB, MiB, deployment, llama_70b, no_resolver, qwen2_7b  # noqa: F401
from test_memory_rules import run_all

from servepilot.errors import BadInput
from servepilot.hardware.cluster import Gpu
from servepilot.planning import plan_deployment

RESERVED = 448 * MiB  # driver_reserved_bytes


def _box(*kinds) -> tuple[Gpu, ...]:
    specs = {
        "small": ("NVIDIA GeForce RTX 5070 Ti", "rtx-5070-ti", 16303, (12, 0)),
        "big": ("NVIDIA GeForce RTX 5090", "rtx-5090", 32607, (12, 0)),
        "h100": ("NVIDIA H100 80GB HBM3", "h100-sxm", 81559, (9, 0)),
        "h200": ("NVIDIA H200", "h200-sxm", 143771, (9, 0)),
    }
    return tuple(
        Gpu(i, specs[k][0], specs[k][1], specs[k][2] * MiB, specs[k][3])
        for i, k in enumerate(kinds)
    )


def _term(plan, name):
    return next(t.bytes for t in plan.terms if t.name == name)


def _plan(version, env=None, spec=None, gpus=("small", "big"), max_model_len=32768):
    dep = deployment(
        spec or qwen2_7b(),
        {"pipeline_parallel_size": 2, "max_model_len": max_model_len},
        gpu=_box(*gpus),
        version=version,
        env=env,
    )
    return dep, plan_deployment(dep)


def test_each_stage_is_budgeted_on_its_own_gpu():
    _, plan = _plan("0.16.0", {"VLLM_PP_LAYER_PARTITION": "8,20"})
    subtract = _term(plan, "activation_peak") + _term(plan, "non_torch")
    budgets = [
        math.ceil((row.total_bytes - RESERVED) * plan.gpu_memory_utilization)
        - row.weights_bytes
        - subtract
        for row in plan.rows
    ]
    assert plan.available_kv_bytes == min(budgets)
    assert (
        plan.rows[0].weights_bytes < plan.rows[1].weights_bytes
    )  # 8 layers + embedding vs 20 + lm_head
    assert any("different sizes" in n for n in plan.notes)


def test_the_partition_moves_layers_between_stages():
    _, even = _plan("0.16.0")
    _, skewed = _plan("0.16.0", {"VLLM_PP_LAYER_PARTITION": "8,20"})
    assert skewed.rows[0].weights_bytes < even.rows[0].weights_bytes
    assert skewed.rows[1].weights_bytes > even.rows[1].weights_bytes
    assert any("[8, 20]" in n for n in skewed.notes)


def test_a_partition_that_does_not_add_up_is_refused():
    with pytest.raises(BadInput, match="VLLM_PP_LAYER_PARTITION"):
        _plan("0.16.0", {"VLLM_PP_LAYER_PARTITION": "10,10"})


def _fit_by_hand(plan, stage_layers):
    """The longest request each check admits: blocks of block_size tokens, page bytes per layer."""
    per_block = plan.page_size_bytes
    return [(avail // (per_block * layers)) * plan.block_size for avail, layers in stage_layers]


@pytest.mark.parametrize(
    ("version", "whole_model"),
    [("0.13.0", False), ("0.14.1", True), ("0.16.0", True), ("0.19.0", False)],
)
def test_the_max_model_len_check_per_release(version, whole_model):
    env = {"VLLM_PP_LAYER_PARTITION": "8,20"}
    _, plan = _plan(version, env, max_model_len=1 << 20)
    subtract = _term(plan, "activation_peak") + _term(plan, "non_torch")
    budgets = [
        math.ceil((row.total_bytes - RESERVED) * plan.gpu_memory_utilization)
        - row.weights_bytes
        - subtract
        for row in plan.rows
    ]
    assert not plan.fits
    if whole_model:
        expected = _fit_by_hand(plan, [(min(budgets), 28)])[0]
    else:
        expected = min(_fit_by_hand(plan, [(budgets[0], 8), (budgets[1], 20)]))
    assert plan.max_model_len_fit == expected


def test_weights_are_judged_against_their_own_gpu():
    # 60 of Llama-70B's 80 layers (~98 GiB) exceed an H100 but not the H200 they are placed on
    dep, _ = _plan(
        "0.16.0",
        {"VLLM_PP_LAYER_PARTITION": "20,60"},
        spec=llama_70b(),
        gpus=("h100", "h200"),
        max_model_len=4096,
    )
    assert [f.code for f in run_all(dep) if f.code == "SP-MEM-001"] == []
    dep, _ = _plan(
        "0.16.0",
        {"VLLM_PP_LAYER_PARTITION": "60,20"},
        spec=llama_70b(),
        gpus=("h100", "h200"),
        max_model_len=4096,
    )
    assert [f.code for f in run_all(dep)] == ["SP-MEM-001"]


@pytest.mark.parametrize(("partition", "fails_on"), [("4,24", None), ("24,4", 0)])
def test_the_online_fp8_load_peak_is_judged_on_each_stage_own_gpu(partition, fails_on):
    # 0.13: the load holds the 16-bit weights plus their FP8 copies; 24 layers of Qwen2-7B
    # need more than the 16 GB RTX 5070 Ti but fit the 32 GB RTX 5090
    dep = deployment(
        qwen2_7b(),
        {"pipeline_parallel_size": 2, "max_model_len": 4096, "quantization": "fp8"},
        gpu=_box("small", "big"),
        version="0.13.0",
        env={"VLLM_PP_LAYER_PARTITION": partition},
    )
    plan = plan_deployment(dep)
    assert plan.load_peak_bytes > _box("small")[0].memory_bytes - RESERVED
    assert plan.load_fits is (fails_on is None)
    assert plan.load_over_stage == fails_on
    assert plan.summary()["load_fits"] is plan.load_fits
    loading = [f for f in run_all(dep) if f.code == "SP-MEM-001" and "loading" in f.title]
    assert bool(loading) is (fails_on is not None)


def test_an_errored_gpu_keeps_its_rank_in_the_stage_budgets():
    from dataclasses import replace

    from servepilot.planning.vllm import _stage_cuda_totals

    # TP 2 x PP 2: ranks 0-1 are stage 0 (GPU 0 unreadable, GPU 1 a 5090), ranks 2-3 stage 1
    box = _box("big", "big", "small", "small")
    box = (replace(box[0], memory_bytes=0, error="NVML: Unknown Error"),) + box[1:]
    dep = deployment(qwen2_7b(), {"pipeline_parallel_size": 2, "tensor_parallel_size": 2},
                     gpu=box, version="0.16.0")
    totals = _stage_cuda_totals(dep, box[2], 2, 2, 1, RESERVED, [])
    assert totals == [box[1].memory_bytes - RESERVED, box[2].memory_bytes - RESERVED]


@pytest.mark.parametrize(("version", "unread"), [("0.5.4", True), ("0.5.5", False)])
def test_a_release_not_read_for_the_partition_env_says_so(version, unread):
    _, plan = _plan(version, {"VLLM_PP_LAYER_PARTITION": "8,20"})
    assert any("VLLM_PP_LAYER_PARTITION was not read" in n for n in plan.notes) is unread
    assert any("[8, 20]" in n for n in plan.notes) is not unread


@pytest.mark.parametrize(("version", "unread"),
                         [("0.6.5", True), ("0.9.1", True), ("0.10.0", True), ("0.10.1", False),
                          ("0.8.5", False)])
def test_releases_not_read_for_other_processes_memory_say_so(version, unread):
    _, plan = _plan(version)
    assert any("other processes" in n and "not read" in n for n in plan.notes) is unread
