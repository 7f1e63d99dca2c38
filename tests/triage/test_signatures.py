"""The signature table is data: validate every row, and its examples against the matcher."""

from __future__ import annotations

import re

import pytest

from servepilot.categories import CATEGORIES
from servepilot.checks.finding import REMEDY_KINDS
from servepilot.triage.scan import needles_for
from servepilot.triage.signatures import (
    Matcher,
    SignatureDataError,
    load_signatures,
    parse_signature_rows,
)

SIGS = load_signatures()
IDS = [s.id for s in SIGS]

# Examples that carry none of the scanner's needles, and why a big log still shows them:
# each is printed inside a traceback (a dense window), near a needle line that names the
# same failure, or at the end of the log (the dense tail).
NEEDLELESS = {
    "quant-min-capability": "raised as ValueError / pydantic 'Value error, ...'",
    "llamacpp-bind-failed": "followed by 'exiting due to HTTP server error'; last lines of the log",
    "torch-gpu-capability-unsupported": "a UserWarning right before a 'CUDA error: no kernel image' line",
    "nccl-p2p-unsupported": "NCCL WARN before 'NCCL error ... unhandled cuda error'",
    "nccl-timeout": "inside a c10::DistBackendError 'what():' block",
    "tokenizer-load-failed": "the end of a traceback",
    "llamacpp-gguf-invalid": "followed by 'error loading model'",
    "llamacpp-ggml-type-newer-than-build": "followed by 'failed to read tensor info'",
    "sycl-kernel-missing-for-device": "a SYCL exception's text where the backend aborts: the log's end",
    "cann-op-kernel-missing": "a line of an ERROR-logged CANN error block after the aclnn call's error",
    "triton-compiler-assertion": "a C assert's abort text, followed by 'RuntimeError: PassManager::run failed'",
    "minja-template-error": "the what() line under 'terminate called ... std::runtime_error'",
    "llama-cpp-python-model-none-echo": "a traceback's source line, after its Traceback line",
    # written by triage from two start-up lines (cuda_archs.py): logs under 4 MB are parsed
    # whole; in bigger ones the start-up lines carry no needle
    "llamacpp-cuda-archs-leave-out-device": "derived from the device and system_info lines",
    "request-exceeds-context": "request-time error returned to the client",
    # SGLang's needles carry "NOT connected"; vLLM's do not (one more pass over every big vLLM
    # log for a rare line; logs under 4 MB are parsed whole)
    "gloo-rank-not-connected": "vLLM: no needle; SGLang: 'NOT connected'",
    "process-killed-oom": "the last line of the log",
    "llamacpp-quantized-v-cache-needs-fa": "followed by 'failed to create context'; the end of a failed start",
    "bus-error-shm": "the raylet prints its /dev/shm shortage as it dies: the last lines of the log",
    "sglang-capture-failed": "the advice lines close the 'Capture cuda graph failed' exception they belong to",
    "no-cuda-gpu": "llama.cpp's old 'no CUDA devices found' is a start-up line; a failed start ends there",
    "chat-template-render-error": "llama.cpp's 'Jinja Exception' is a request error returned to the client",
    "nccl-cuda-oom": "NCCL WARN before 'NCCL error ... unhandled cuda error', or inside a traceback window",
    "sglang-package-too-old": "the last line of SGLang's 'Scheduler hit an exception: Traceback' block",
    "worker-died-by-signal": "the executor's shutdown lines: the end of a failed start",
    "worker-stopped-sigterm": "the executor's shutdown lines: the end of a failed start",
    "ray-object-store-small-shm": "a Ray start-up warning; it only ever explains, never causes (warning rank)",
    # ggml's aborts end the process: the last lines of the log (the dense tail)
    "ggml-sched-op-unsupported": "GGML_ABORT in the scheduler: the process ends on it",
    "ggml-metal-type-not-implemented": "GGML_ASSERT / GGML_ABORT in Metal: the process ends on it",
    "ggml-backend-kernel-missing": "GGML_ABORT / GGML_ASSERT in a kernel: the process ends on it",
    "ggml-fa-kv-type-combination": "printed right before ggml-cuda's GGML_ABORT: the log's end",
}


def test_there_are_at_least_fifty_signatures_with_unique_ids():
    assert len(SIGS) >= 50
    assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("sig", SIGS, ids=IDS)
def test_every_row_is_complete(sig):
    assert sig.category in CATEGORIES
    assert all(rule.category in CATEGORIES for rule in sig.refine)
    assert sig.source.strip(), "every signature says where its message text comes from"
    assert re.search(r"@|https://", sig.source), "a source is file@tag or a URL"
    assert sig.patterns and all(isinstance(p, re.Pattern) for p in sig.patterns)
    assert all(r.kind in REMEDY_KINDS for r in sig.remedies)
    assert sig.examples, "every signature carries at least one real example line"
    if not sig.benign and sig.tier == "cause":
        assert sig.remedies, "a cause without a remedy helps nobody"


@pytest.mark.parametrize("sig", SIGS, ids=IDS)
def test_examples_match_their_own_signature_first(sig):
    matcher = Matcher(SIGS)
    for example in sig.examples:
        assert any(p.search(example) for p in sig.patterns), example
        best = matcher.match(example)
        # a wrapper row hands its example to the row that knows the wrapped message
        if sig.unwrap and best.signature.id != sig.id:
            continue
        assert best.signature.id == sig.id, f"{example!r} is taken by {best.signature.id}"


@pytest.mark.parametrize("sig", [s for s in SIGS if not s.benign], ids=[s.id for s in SIGS if not s.benign])
def test_examples_carry_a_needle_of_the_big_file_prefilter(sig):
    missing = [
        e
        for e in sig.examples
        for engine in sig.engines
        if not any(n.decode() in e for n in needles_for(engine))
    ]
    if sig.id in NEEDLELESS:
        assert missing, f"{sig.id} now carries a needle: drop it from NEEDLELESS"
    else:
        assert not missing, f"{sig.id}: {missing}"


def test_check_codes_point_at_registered_checks():
    from servepilot.checks.registry import load_rules

    codes = {r.check for s in SIGS for r in s.remedies if r.check}
    assert len(codes) >= 10
    assert codes <= {r.code for r in load_rules()}


GOOD = {
    "id": "x",
    "category": "shm",
    "patterns": ["Bus error"],
    "explanation": "e",
    "source": "https://example.org/1",
    "engines": ["vllm"],
    "remedies": [{"kind": "env", "change": "c", "tradeoff": "t"}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"category": "disk"}, "unknown category"),
        ({"patterns": ["(unclosed"]}, "bad regex"),
        ({"source": ""}, "missing source"),
        ({"engines": ["tgi"]}, "engines"),
        ({"tier": "sometimes"}, "tier"),
        ({"remedies": [{"kind": "pray", "change": "c", "tradeoff": "t"}]}, "remedy kind"),
        ({"remedies": [{"kind": "env", "change": "", "tradeoff": "t"}]}, "non-empty"),
        ({"unwrap": "inner"}, "unwrap group"),
        ({"analyzer": "magic"}, "unknown analyzer"),
    ],
)
def test_malformed_rows_are_rejected_with_the_row_named(change, message):
    with pytest.raises(SignatureDataError, match=message):
        parse_signature_rows([{**GOOD, **change}])
    assert parse_signature_rows([GOOD])[0].id == "x"


def test_duplicate_ids_are_rejected():
    with pytest.raises(SignatureDataError, match="duplicate"):
        parse_signature_rows([GOOD, GOOD])


def test_explanations_interpolate_named_groups():
    m = Matcher(SIGS).match(
        "ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8)."
    )
    assert "28" in m.explanation and "{" not in m.explanation
    assert any("28" in r.change for r in m.remedies)


def test_forced_backend_rejected_only_for_kv_dtype_is_a_kv_cache_dtype_failure():
    matcher = Matcher(SIGS)
    kv = matcher.match(
        "ValueError: Selected backend AttentionBackendEnum.TRITON_MLA is not valid for this configuration. Reason: "
        "['kv_cache_dtype not supported']"
    )
    assert kv.category == "kv_cache_dtype" and kv.remedies[0].check == "SP-KV-001"
    cc = matcher.match(
        "ValueError: Selected backend AttentionBackendEnum.FLASHMLA is not valid for this configuration. Reason: "
        "['compute capability not supported']"
    )
    assert cc.category == "attention_backend"


def test_selector_with_no_backend_for_this_gpu_is_attention_backend():
    m = Matcher(SIGS).match(
        "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576). "
        "Reasons: {FLASHMLA: [compute capability not supported], CUTLASS_MLA: [kv_cache_dtype not supported, compute "
        "capability not supported]}."
    )
    assert m.category == "attention_backend"
