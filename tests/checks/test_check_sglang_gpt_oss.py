"""SGLang's gpt-oss hook: the attention backends it asserts (server_args.py@v0.5.1.post3,
@v0.5.3.post3, @v0.5.5.post3, @v0.5.9; arg_groups/model_hook.py@v0.5.23)."""

from __future__ import annotations

from functools import partial

import pytest
from checkfixtures import GIB, codes, finding, gpt_oss_120b, sglang_deployment

from servepilot.checks import run_checks

_dep = partial(sglang_deployment, memory=180 * GIB)


@pytest.mark.parametrize(
    "version, options, refused",
    [
        ("0.5.5", {"attention_backend": "flashinfer"}, True),
        ("0.5.9", {"attention_backend": "flashinfer"}, True),
        ("0.5.23", {"attention_backend": "torch_native"}, True),
        ("0.5.1", {"attention_backend": "flashinfer"}, True),
        # neighbours: the backends it runs on, and no flag at all (its own default)
        ("0.5.5", {"attention_backend": "triton"}, False),
        ("0.5.9", {"attention_backend": "fa3"}, False),
        ("0.5.9", {}, False),
        # from 0.5.3 naming one phase leaves the other None: the assert fails on it
        ("0.5.9", {"prefill_attention_backend": "fa3"}, True),
        (
            "0.5.9",
            {"prefill_attention_backend": "fa3", "decode_attention_backend": "triton"},
            False,
        ),
        # 0.5.1 reads --attention-backend only
        ("0.5.1", {"prefill_attention_backend": "flashinfer"}, False),
    ],
)
def test_gpt_oss_backend_assert(tmp_path, version, options, refused):
    result = run_checks(_dep(gpt_oss_120b(tmp_path / "oss"), (9, 0), version, **options))
    assert ("SP-ATTN-010" in codes(result)) is refused


def test_gpt_oss_assert_text_is_the_engines(tmp_path):
    result = run_checks(
        _dep(gpt_oss_120b(tmp_path / "oss"), (9, 0), "0.5.9", prefill_attention_backend="fa3")
    )
    detail = finding(result, "SP-ATTN-010").detail
    assert (
        "GptOssForCausalLM requires one of ['triton', 'trtllm_mha', 'fa3', 'fa4', 'ascend']"
        in detail
    )
    assert "- Prefill: fa3\n- Decode: None" in detail


def test_other_architectures_are_not_judged_by_the_gpt_oss_assert(tmp_path):
    from checkfixtures import llama_like

    result = run_checks(
        _dep(llama_like(tmp_path / "l"), (9, 0), "0.5.9", attention_backend="flashinfer")
    )
    assert "SP-ATTN-010" not in codes(result)
