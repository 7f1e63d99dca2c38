"""SP-ATTN-006: SGLang's backend list for hybrid GDN models on Blackwell, per release read."""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
from checkfixtures import GIB, codes, finding, llama_like, sglang_deployment

from servepilot.checks import run_checks


def _qwen3_next(root):
    # a Qwen3-Next-shaped config: what matters to the rule is the model_type SGLang maps to
    # Qwen3NextConfig
    return llama_like(
        root, arch="Qwen3NextForCausalLM", model_type="qwen3_next", heads=16, kv_heads=2
    )


_dep = partial(sglang_deployment, memory=180 * GIB)


def test_flashinfer_on_sm100_is_refused_by_0_5_17_with_sglangs_words_and_a_working_fix(tmp_path):
    """The corpus case (sgl-project/sglang#35080): --attention-backend flashinfer on a B300."""
    dep = _dep(_qwen3_next(tmp_path / "q"), (10, 3), "0.5.17", attention_backend="flashinfer")
    f = finding(run_checks(dep), "SP-ATTN-006")
    assert f.severity == "error" and f.category == "attention_backend"
    assert "backends are supported on Blackwell GPUs for hybrid GDN models" in f.detail
    fixed = dataclasses.replace(
        dep,
        launch=dataclasses.replace(
            dep.launch, options={**dep.launch.options, **f.remedies[0].args["set"]}
        ),
    )
    assert "SP-ATTN-006" not in codes(run_checks(fixed))


@pytest.mark.parametrize(
    "version, cc, backend, refused",
    [
        ("0.5.17", (12, 0), "flashinfer", False),  # SM12x keeps flashinfer, loses fa4
        ("0.5.17", (12, 0), "fa4", True),
        ("0.5.13", (10, 0), "flashinfer", False),  # 0.5.10-0.5.15: one list for every Blackwell
        ("0.5.6.post2", (10, 0), "flashinfer", True),  # only triton / trtllm_mha then
        ("0.5.23", (10, 0), "flashinfer", False),  # flashinfer back on SM100 from 0.5.21
        ("0.5.17", (9, 0), "flashinfer", False),  # Hopper: no such assert
    ],
)
def test_the_list_follows_the_release_and_the_gpu_generation(
    tmp_path, version, cc, backend, refused
):
    dep = _dep(_qwen3_next(tmp_path / "q"), cc, version, attention_backend=backend)
    assert ("SP-ATTN-006" in codes(run_checks(dep))) == refused


def test_split_backends_are_judged_as_the_release_reads_them(tmp_path):
    path = _qwen3_next(tmp_path / "q")
    split = {
        "attention_backend": "fa3",
        "prefill_attention_backend": "triton",
        "decode_attention_backend": "fa4",
    }
    # 0.5.17 checks prefill and decode when both are given (fa4 is fine on SM100) ...
    assert "SP-ATTN-006" not in codes(run_checks(_dep(path, (10, 0), "0.5.17", **split)))
    # ... 0.5.13 reads only --attention-backend, which is fa3
    assert "SP-ATTN-006" in codes(run_checks(_dep(path, (10, 0), "0.5.13", **split)))


def test_other_models_and_unread_releases(tmp_path):
    llama = _dep(llama_like(tmp_path / "l"), (10, 0), "0.5.6.post2", attention_backend="flashinfer")
    assert "SP-ATTN-006" not in codes(run_checks(llama))
    unread = run_checks(
        _dep(_qwen3_next(tmp_path / "q"), (10, 0), "0.5.3", attention_backend="flashinfer")
    )
    f = finding(unread, "SP-ATTN-006")
    assert f.severity == "info" and "not known" in f.title
