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
        (
            "llama",
            (12, 0),
            "0.5.6.post2",
            {"attention_backend": "trtllm_mha"},
            True,
        ),  # the RTX 5090 case
        ("llama", (10, 0), "0.5.6.post2", {"attention_backend": "trtllm_mha"}, False),
        (
            "mla",
            (12, 0),
            "0.5.6.post2",
            {"attention_backend": "trtllm_mla"},
            False,
        ),  # is_blackwell: 10 and 12
        ("mla", (9, 0), "0.5.13", {"attention_backend": "trtllm_mla"}, True),
        (
            "llama",
            (9, 0),
            "0.5.13",
            {"decode_attention_backend": "trtllm_mha"},
            False,
        ),  # decode: SM90 ok from 0.5.11
        (
            "llama",
            (9, 0),
            "0.5.13",
            {"attention_backend": "trtllm_mha"},
            True,
        ),  # prefill still needs SM100
        ("llama", (12, 0), "0.5.17", {"attention_backend": "fa3"}, True),
        ("mla", (8, 0), "0.5.17", {"attention_backend": "fa3"}, True),  # fa3 on SM80: MHA only
        ("llama", (8, 0), "0.5.17", {"attention_backend": "fa3"}, False),
        (
            "llama",
            (12, 0),
            "0.5.10.post1",
            {"attention_backend": "trtllm_mha"},
            False,
        ),  # modelled line: SP-ATTN-004
    ],
)
def test_named_backends_against_the_release_asserts(tmp_path, model, cc, version, options, refused):
    path = llama_like(tmp_path / "l") if model == "llama" else _mla(tmp_path / "m")
    assert ("SP-ATTN-007" in codes(run_checks(_dep(path, cc, version, **options)))) == refused


def test_a_remedy_clears_the_refusal(tmp_path):
    dep = _dep(llama_like(tmp_path / "l"), (12, 0), "0.5.6.post2", attention_backend="trtllm_mha")
    f = finding(run_checks(dep), "SP-ATTN-007")
    assert "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100)" in f.detail
    opts = {**dep.launch.options, **f.remedies[0].args["set"]}
    fixed = dataclasses.replace(dep, launch=dataclasses.replace(dep.launch, options=opts))
    assert "SP-ATTN-007" not in codes(run_checks(fixed))
