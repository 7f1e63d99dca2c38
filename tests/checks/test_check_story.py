"""The story as acceptance: Kimi-K2.5-NVFP4 on 8x RTX PRO 6000 (SM120) with vLLM 0.16 / 0.18 / H200."""

from __future__ import annotations

import dataclasses

import pytest
from checkfixtures import codes, deployment, finding, kimi_like

from servepilot.checks import run_checks
from servepilot.checks.remedies import overlay_without_kv

STORY_ENV = {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"}
STORY_OPTS = {"tensor_parallel_size": 8, "trust_remote_code": True, "kv_cache_dtype": "auto", "port": 8000,
              "tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k2"}


def _not_memory(findings):
    # memory findings come from the planner's rules (checks/rules/memory.py), judged there
    return [f for f in findings
            if f.severity == "error" and not f.category.startswith("oom") and f.category != "max_model_len"]


@pytest.fixture
def kimi(tmp_path):
    return kimi_like(tmp_path / "kimi-k2.5-nvfp4")


def test_016_on_sm120_fails_with_every_backend_reason(kimi):
    result = run_checks(deployment(kimi, version="0.16.0", options=STORY_OPTS, env=STORY_ENV))
    assert result.verdict == "fail"
    f = result.findings[0]
    # a 16-bit KV cache would start: the fp8 KV is the cause
    assert f.code == "SP-ATTN-001" and f.severity == "error" and f.category == "kv_cache_dtype"
    assert "fp8_e4m3" in f.detail and "kv_cache_scheme" in f.detail
    # the engine's own list, in its priority order, with its reasons
    assert [c["backend"] for c in result.resolved["candidates"]] == ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA",
                                                                     "TRITON_MLA", "FLASHMLA_SPARSE"]
    reasons = {c["backend"]: c["reasons"] for c in result.resolved["candidates"]}
    assert reasons["TRITON_MLA"] == ["kv_cache_dtype not supported"]
    assert reasons["FLASHINFER_MLA"] == ["compute capability not supported"]
    assert "compute capability not supported" in reasons["FLASHMLA"]
    assert "compute capability not supported" in reasons["FLASH_ATTN_MLA"]
    assert result.resolved["kv_cache_dtype"] == "fp8_e4m3"
    assert result.resolved["attention_backend"] is None


def test_016_remedies_are_ranked_flag_upgrade_overlay(kimi):
    f = finding(run_checks(deployment(kimi, version="0.16.0", options=STORY_OPTS, env=STORY_ENV)), "SP-ATTN-001")
    kinds = [r.kind for r in f.remedies]
    assert kinds[:3] == ["flag", "upgrade", "overlay"]
    flag, upgrade, overlay = f.remedies[:3]
    assert flag.args["set"]["kv_cache_dtype"] == "bfloat16" and flag.args["unset"] == []
    # bf16 halves the tokens that fit: when 262,144 no longer does, the remedy shortens the context
    if "max_model_len" in flag.args["set"]:
        assert flag.args["set"]["max_model_len"] < 262144 and flag.args["set"]["max_model_len"] % 1024 == 0
        assert f"--max-model-len {flag.args['set']['max_model_len']}" in flag.change
    # 61 layers x 576 latent: 35,136 B/token in fp8, 70,272 B/token in bf16, per GPU (not sharded)
    assert "35,136" in flag.tradeoff and "70,272" in flag.tradeoff and "lost" in flag.tradeoff
    assert upgrade.args == {"upgrade": {"package": "vllm", "specifier": ">=0.18.0"}}
    assert "TRITON_MLA" in upgrade.tradeoff
    ops = overlay.args["overlay"]
    assert ops["config.json"] == [{"op": "remove", "path": "/quantization_config/kv_cache_scheme"}]
    assert ops["hf_quant_config.json"] == [{"op": "remove", "path": "/quantization/kv_cache_quant_algo"}]


def test_016_offers_hf_overrides_with_the_whole_quant_dict(kimi):
    f = finding(run_checks(deployment(kimi, version="0.16.0", options=STORY_OPTS)), "SP-ATTN-001")
    hf = [r for r in f.remedies if r.args and "hf_overrides" in r.args.get("set", {})]
    assert hf, [r.change for r in f.remedies]
    qc = hf[0].args["set"]["hf_overrides"]["quantization_config"]
    assert "kv_cache_scheme" not in qc and qc["quant_algo"] == "NVFP4" and "config_groups" in qc
    assert "replaces the whole" in hf[0].tradeoff


def test_016_warns_about_the_custom_code(kimi):
    result = run_checks(deployment(kimi, version="0.16.0", options=STORY_OPTS, env=STORY_ENV))
    f = finding(result, "SP-CODE-002")
    assert f.severity == "warning"
    assert "modeling_kimi.py" in f.detail and "sha256" in f.detail


def test_018_resolves_triton_mla_with_fp8(kimi):
    result = run_checks(deployment(kimi, version="0.18.0", options=STORY_OPTS, env=STORY_ENV))
    assert "SP-ATTN-001" not in codes(result)
    assert _not_memory(result.findings) == []
    assert result.resolved["attention_backend"] == "TRITON_MLA"
    assert result.resolved["kv_cache_dtype"] == "fp8_e4m3"


def test_h200_resolves_flashmla_with_fp8(kimi):
    result = run_checks(deployment(kimi, version="0.16.0", cc=(9, 0), memory=141 * 2**30, options=STORY_OPTS))
    assert result.resolved["attention_backend"] == "FLASHMLA"
    assert result.resolved["kv_cache_dtype"].startswith("fp8")
    assert result.resolved["block_size"] == 64  # FlashMLA forces 64 (vllm/platforms/cuda.py@v0.16.0)
    # NVFP4 has no native kernel on SM90: weight-only Marlin, with a speed warning
    assert finding(result, "SP-QUANT-002").severity == "warning"


def test_overlay_without_kv_scheme_passes_on_016(kimi):
    dep = deployment(kimi, version="0.16.0", options=STORY_OPTS)
    _, stripped = overlay_without_kv(dep)
    result = run_checks(dataclasses.replace(dep, spec=stripped))
    assert result.resolved["attention_backend"] == "TRITON_MLA"
    assert result.resolved["kv_cache_storage"] == "bfloat16"
    assert _not_memory(result.findings) == []


def test_overlay_written_to_disk_passes(tmp_path):
    plain = kimi_like(tmp_path / "overlay", kv_in_config=False, kv_in_hf_quant=False)
    result = run_checks(deployment(plain, version="0.16.0", options=STORY_OPTS))
    assert result.resolved["kv_cache_dtype"] == "auto" and result.resolved["attention_backend"] == "TRITON_MLA"
    assert _not_memory(result.findings) == []


def test_explicit_bfloat16_passes_on_016(kimi):
    result = run_checks(deployment(kimi, version="0.16.0", options=dict(STORY_OPTS, kv_cache_dtype="bfloat16")))
    assert result.resolved["attention_backend"] == "TRITON_MLA"
    assert "SP-ATTN-001" not in codes(result)


def test_014_has_no_bfloat16_escape(kimi):
    # vLLM 0.14's MLA backends list only "auto" (and fp8): an explicit bfloat16 is rejected too,
    # so the flag remedy must not be offered there; the overlay still works
    f = finding(run_checks(deployment(kimi, version="0.14.1", options=STORY_OPTS)), "SP-ATTN-001")
    kinds = [r.kind for r in f.remedies]
    assert "overlay" in kinds
    assert not any((r.args or {}).get("set", {}).get("kv_cache_dtype") == "bfloat16" for r in f.remedies)
