"""A refined reading brings its own fixes: when a traceback's frames or the start-up phase move
a signature to another category, the first fix offered must be one for that category, not the
signature's default (a CUDA OOM during graph capture is fixed by capturing less, not by more
GPUs for the weights).
"""

from __future__ import annotations

import pytest

from servepilot.checks.registry import RULES, load_rules
from servepilot.triage import triage_text
from servepilot.triage.signatures import load_signatures

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 74.00 MiB."


def _decisions(sig):
    """(where, category, remedies) for every way the signature can decide."""
    phase_remedies = dict(sig.by_phase_remedies)
    yield "base", sig.category, sig.remedies
    for n, rule in enumerate(sig.refine):
        yield f"refine[{n}]", rule.category, rule.remedies or sig.remedies
    for phase, category, _explanation in sig.by_phase:
        yield f"phase {phase}", category, phase_remedies.get(phase, sig.remedies)


def test_a_changed_category_never_leads_with_a_fix_checked_for_another():
    load_rules()
    category_of_check = {r.code: r.category for r in RULES}
    wrong = []
    for sig in load_signatures():
        for where, category, remedies in _decisions(sig):
            if where == "base" or category == sig.category or not remedies:
                continue
            check = remedies[0].check
            if check and category_of_check.get(check, category) != category:
                wrong.append(f"{sig.id} {where}: {category} led by {check}")
    assert wrong == []


# vLLM's capture line (v1/worker/gpu_model_runner.py@v0.10.2 "Capturing CUDA graphs"), then an
# OOM: the graphs did not fit; beside it, the weights still loading decide the other way.
@pytest.mark.parametrize(
    ("progress", "category", "first_fix"),
    [
        (
            "INFO 02-03 03:43:49 model_runner.py:625] Capturing the model for CUDA graphs. "
            "This may lead to unexpected consequences if the model is not static.",
            "cuda_graph",
            "--enforce-eager",
        ),
        (
            "INFO 07-24 21:22:31 model_runner.py:255] Loading model weights took 14.2487 GB",
            "oom_kv_cache",
            "--max-num-batched-tokens",
        ),
        (
            "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:05<00:05,  2.6s/it]",
            "oom_weights",
            "--tensor-parallel-size",
        ),
    ],
)
def test_the_first_fix_follows_the_phase(progress, category, first_fix):
    diagnosis = triage_text(f"{progress}\n{OOM}\n")
    assert diagnosis.root_cause.category == category
    assert first_fix in diagnosis.remedies[0].change


# ggml's CUDA pool for a batch's temporary results (ggml-cuda.cu ggml_cuda_pool_leg::alloc,
# llama-cpp-python 0.3.36's vendored llama.cpp): the batch flags, not the engines' Python flags.
def test_a_ggml_compute_pool_oom_offers_llama_cpp_batch_flags():
    log = (
        "CUDA error: out of memory\n"
        "  current device: 0, in function alloc at /llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:411\n"
    )
    diagnosis = triage_text(log)
    assert diagnosis.root_cause.category == "oom_kv_cache"
    assert "-ub" in diagnosis.remedies[0].change
    assert not any("--gpu-memory-utilization" in r.change for r in diagnosis.remedies)
