"""SGLang's asserts on a named attention backend. --attention-backend is judged by SP-ATTN-004
where the whole choice is modelled (every line 0.4.0-0.5.23 now) and by SP-ATTN-007 elsewhere;
--prefill/--decode-attention-backend by SP-ATTN-007 on every line read."""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
from checkfixtures import GIB, MLA_TEXT, _write, codes, finding, llama_like, sglang_deployment

from servepilot.checks import run_checks


def _mla(root):
    root.mkdir(parents=True, exist_ok=True)
    _write(root, "config.json", MLA_TEXT)
    return root


_dep = partial(sglang_deployment, memory=96 * GIB)


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
        # decode on trtllm_mha off SM90/SM100/SM120
        ("llama", (8, 0), "0.5.13", {"decode_attention_backend": "trtllm_mha"}, True),
        ("mla", (9, 0), "0.5.20", {"decode_attention_backend": "trtllm_mla"}, True),
    ],
)
def test_named_backends_against_the_release_asserts(tmp_path, model, cc, version, options, refused):
    path = llama_like(tmp_path / "l") if model == "llama" else _mla(tmp_path / "m")
    found = set(codes(run_checks(_dep(path, cc, version, **options))))
    assert bool(found & {"SP-ATTN-004", "SP-ATTN-007"}) == refused
    if "attention_backend" in options:  # a modelled line: SP-ATTN-004 alone speaks
        assert "SP-ATTN-007" not in found


def test_a_remedy_clears_the_refusal(tmp_path):
    dep = _dep(llama_like(tmp_path / "l"), (8, 0), "0.5.13", prefill_attention_backend="trtllm_mha")
    f = finding(run_checks(dep), "SP-ATTN-007")
    assert "TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100)" in f.detail
    opts = {**dep.launch.options, **f.remedies[0].args["set"]}
    fixed = dataclasses.replace(dep, launch=dataclasses.replace(dep.launch, options=opts))
    assert "SP-ATTN-007" not in codes(run_checks(fixed))
