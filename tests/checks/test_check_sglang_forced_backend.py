"""SP-ATTN-007: SGLang's asserts on a named attention backend, on release lines whose default
choice servepilot does not model."""

from __future__ import annotations

import dataclasses

import pytest
from checkfixtures import GIB, MLA_TEXT, _write, codes, deployment, finding, llama_like

from servepilot.checks import run_checks


def _mla(root):
    root.mkdir(parents=True, exist_ok=True)
    _write(root, "config.json", MLA_TEXT)
    return root


def _dep(path, cc, version, **options):
    return deployment(
        path,
        cc=cc,
        n=1,
        version=version,
        engine="sglang",
        options={"tp_size": 1, **options},
        memory=96 * GIB,
    )


@pytest.mark.parametrize(
    "model, cc, version, options, refused",
    [
        # prefill on trtllm_mha needs SM100: the RTX 5090 / RTX PRO 6000 case
        ("llama", (12, 0), "0.5.13", {"attention_backend": "trtllm_mha"}, True),
        ("llama", (10, 0), "0.5.13", {"attention_backend": "trtllm_mha"}, False),
        # trtllm_mla: is_blackwell_supported takes majors 10-12 from 0.5.9
        ("mla", (12, 0), "0.5.13", {"attention_backend": "trtllm_mla"}, False),
        ("mla", (9, 0), "0.5.13", {"attention_backend": "trtllm_mla"}, True),
        # decode on trtllm_mha: SM90 accepted from 0.5.11
        ("llama", (9, 0), "0.5.13", {"decode_attention_backend": "trtllm_mha"}, False),
        ("llama", (9, 0), "0.5.13", {"attention_backend": "trtllm_mha"}, True),
        ("llama", (12, 0), "0.5.17", {"attention_backend": "fa3"}, True),
        ("mla", (8, 0), "0.5.17", {"attention_backend": "fa3"}, True),  # fa3 on SM80: MHA only
        ("llama", (8, 0), "0.5.17", {"attention_backend": "fa3"}, False),
        # a line whose whole choice is modelled: SP-ATTN-004 speaks there, not this rule
        ("llama", (12, 0), "0.5.6.post2", {"attention_backend": "trtllm_mha"}, False),
    ],
)
def test_named_backends_against_the_release_asserts(tmp_path, model, cc, version, options, refused):
    path = llama_like(tmp_path / "l") if model == "llama" else _mla(tmp_path / "m")
    assert ("SP-ATTN-007" in codes(run_checks(_dep(path, cc, version, **options)))) == refused


def test_a_remedy_clears_the_refusal(tmp_path):
    dep = _dep(llama_like(tmp_path / "l"), (12, 0), "0.5.13", attention_backend="trtllm_mha")
    f = finding(run_checks(dep), "SP-ATTN-007")
    assert "TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100)" in f.detail
    opts = {**dep.launch.options, **f.remedies[0].args["set"]}
    fixed = dataclasses.replace(dep, launch=dataclasses.replace(dep.launch, options=opts))
    assert "SP-ATTN-007" not in codes(run_checks(fixed))
