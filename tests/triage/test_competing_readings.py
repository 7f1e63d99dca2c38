"""Issue 13: when two causes compete, the answer shows both with a confidence.

vLLM's attention selector lists each backend's reasons for refusing the configuration
(vllm/v1/attention/backend.py@v0.16.0 validate_configuration; vllm/platforms/cuda.py
get_valid_backends). When, for some backend this GPU supports, the KV cache dtype is the only
objection, changing the KV cache dtype finds a backend; when other backends object to more,
the attention the model needs is a second reading.
"""

from __future__ import annotations

from servepilot.triage import triage_text

_PREFIX = "(EngineCore pid=125) ERROR 06-10 07:31:04 [core.py:1199] "
_CONFIG = (
    "ValueError: No valid attention backend found for cuda with "
    "AttentionSelectorConfig(head_size=256, "
    "dtype=torch.bfloat16, kv_cache_dtype=nvfp4, block_size=None, use_mla=False, has_sink=False, "
    "use_sparse=False, use_mm_prefix=True). Reasons: {"
)


def _selector_error(reasons: str) -> str:
    return (
        "(APIServer pid=1) INFO 06-10 07:30:00 [api_server.py:1885] "
        "vLLM API server version 0.22.1\n"
        f"{_PREFIX}EngineCore failed to start.\n"
        f"{_PREFIX}Traceback (most recent call last):\n"
        f'{_PREFIX}  File "/py/vllm/platforms/cuda.py", line 400, in get_attn_backend_cls\n'
        f"{_PREFIX}    raise ValueError(\n"
        f"{_PREFIX}{_CONFIG}{reasons}}}.\n"
    )


# Gemma 4 with --kv-cache-dtype nvfp4 on a GB10 (vLLM built from source, 0.22 dev): the reasons
# as printed in https://github.com/jethac/dgx-spark-hijinks/blob/
# 4f28a0c22a854e91396ffa24897b55f94bd7b069/results/claude_window2_20260611/part3/
# claude_p3_server_attempt3_auto_backend.log
_PARTIAL_MM = "partial multimodal token full attention not supported"
_MIXED = (
    f"FLASH_ATTN: [kv_cache_dtype not supported, {_PARTIAL_MM}], "
    f"FLASHINFER: [{_PARTIAL_MM}], "
    "TRITON_ATTN: [kv_cache_dtype not supported], FLEX_ATTENTION: [kv_cache_dtype not supported]"
)


def test_a_backend_the_kv_dtype_alone_blocks_makes_it_the_kv_dtype_with_the_backend_as_a_rival():
    d = triage_text(_selector_error(_MIXED))
    assert d.root_cause.category == "kv_cache_dtype"
    assert "TRITON_ATTN" in d.root_cause.explanation
    rival = next(a for a in d.alternatives if a.category == "attention_backend")
    assert rival.basis == "rival" and rival.confidence < d.root_cause.confidence
    assert d.root_cause.confidence <= 0.7  # competed: not as sure as an uncontested reading


def test_when_every_usable_backend_objects_only_to_the_kv_dtype_there_is_no_rival():
    d = triage_text(_selector_error(
        "TRITON_ATTN: [kv_cache_dtype not supported], "
        "FLEX_ATTENTION: [kv_cache_dtype not supported]"
    ))
    assert d.root_cause.category == "kv_cache_dtype"
    assert d.root_cause.confidence == 0.9
    assert not [a for a in d.alternatives if a.basis == "rival"]


def test_when_no_backend_objects_to_the_kv_dtype_alone_it_is_the_attention_backend():
    d = triage_text(_selector_error(
        f"FLASH_ATTN: [kv_cache_dtype not supported, {_PARTIAL_MM}], FLASHINFER: [{_PARTIAL_MM}]"
    ))
    assert d.root_cause.category == "attention_backend"
