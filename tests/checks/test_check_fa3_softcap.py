"""Gemma 2's attention soft-capping against the FlashAttention 3 build vLLM 0.10.1-0.16 ships."""

from __future__ import annotations

import json

import pytest
from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks


def gemma2_like(root):
    path = llama_like(
        root, heads=8, kv_heads=4, arch="Gemma2ForCausalLM", model_type="gemma2", max_pos=8192
    )
    config = json.loads((path / "config.json").read_text())
    config.update(head_dim=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize(
    "version, cc, refused",
    [
        ("0.11.0", (9, 0), True),  # FA3 on Hopper, built with FLASHATTENTION_DISABLE_SOFTCAP
        ("0.16.0", (9, 0), True),
        ("0.18.0", (9, 0), False),  # its pinned FA3 build keeps soft-capping
        ("0.17.0", (9, 0), False),  # not read: no claim
        ("0.11.0", (8, 0), False),  # FlashAttention 2 on Ampere applies the cap
    ],
)
def test_fa3_without_softcap_refuses_gemma2_on_hopper(tmp_path, version, cc, refused):
    result = run_checks(
        deployment(gemma2_like(tmp_path / "m"), cc=cc, n=1, version=version, memory=80 * GIB)
    )
    assert ("SP-ATTN-009" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-ATTN-009")
        assert f.severity == "error" and f.category == "attention_backend"
        assert "does not support tanh softcapping" in f.detail
        assert result.errors[0].code == "SP-ATTN-009"


def test_flash_attention_2_asked_for_keeps_the_cap(tmp_path):
    dep = deployment(
        gemma2_like(tmp_path / "m"),
        cc=(9, 0),
        n=1,
        version="0.11.0",
        memory=80 * GIB,
        env={"VLLM_FLASH_ATTN_VERSION": "2"},
    )
    assert "SP-ATTN-009" not in codes(run_checks(dep))


def test_a_model_without_attention_softcap_is_not_concerned(tmp_path):
    path = llama_like(tmp_path / "m")
    assert "SP-ATTN-009" not in codes(
        run_checks(deployment(path, cc=(9, 0), n=1, version="0.11.0", memory=80 * GIB))
    )
