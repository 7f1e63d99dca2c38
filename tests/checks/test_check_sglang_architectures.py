"""SP-ARCH-002: the checkpoint's architecture against the SGLang release's model registry."""

from __future__ import annotations

import pytest
from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks
from servepilot.engines.sglang.release import architecture_status


def _sglang(path, version):
    return deployment(
        path,
        cc=(9, 0),
        n=1,
        version=version,
        engine="sglang",
        options={"tp_size": 1},
        memory=80 * GIB,
    )


@pytest.mark.parametrize(
    "arch, version, status",
    [
        (
            "Qwen3NextForCausalLM",
            "0.5.1.post3",
            "absent",
        ),  # the read before the first one that has it
        ("Qwen3NextForCausalLM", "0.5.2", "native"),
        ("Qwen3NextForCausalLM", "0.5.1.post2", "absent"),  # older than a read without it
        ("LlamaForCausalLM", "0.1.20", "unknown"),  # older than the first read (0.2.15)
        ("NoSuchArchForCausalLM", "0.5.23", "absent"),
        ("NoSuchArchForCausalLM", "0.6.0", "unknown"),  # newer than the newest read
    ],
)
def test_status_follows_the_reads(arch, version, status):
    assert architecture_status(arch, version)[0] == status


def test_before_the_transformers_fallback_an_unknown_architecture_is_an_error(tmp_path):
    path = llama_like(tmp_path / "q3", arch="Qwen3ForCausalLM", model_type="qwen3")
    f = finding(run_checks(_sglang(path, "0.4.3.post2")), "SP-ARCH-002")
    assert f.severity == "error" and "are not supported for now" in f.detail
    since = architecture_status("Qwen3ForCausalLM", "0.5.2")[1]
    assert f.remedies[0].args == {"upgrade": {"package": "sglang", "specifier": f">={since}"}}
    assert "SP-ARCH-002" not in codes(run_checks(_sglang(path, since)))


def test_from_0_4_7_the_transformers_fallback_makes_it_a_warning(tmp_path):
    path = llama_like(tmp_path / "x", arch="NoSuchArchForCausalLM", model_type="nosuch")
    f = finding(run_checks(_sglang(path, "0.5.10.post1")), "SP-ARCH-002")
    assert f.severity == "warning" and "Transformers implementation" in f.detail
    assert not f.remedies  # in no release read: nothing to upgrade to


def test_an_unread_release_makes_the_verdict_unknown_not_pass(tmp_path):
    path = llama_like(tmp_path / "x", arch="NoSuchArchForCausalLM", model_type="nosuch")
    result = run_checks(_sglang(path, "0.6.0"))  # newer than the newest release read: not known
    assert result.verdict == "unknown" and any(
        "SGLang 0.6.0 implements" in u.why for u in result.unknowns
    )
    known = run_checks(
        _sglang(llama_like(tmp_path / "l"), "0.6.0")
    )  # Llama: in every read, assumed kept
    assert not any("implements" in u.why for u in known.unknowns)
