"""Attention sinks and the exact compute capability vLLM 0.10-0.12 test for FlashInfer.

vllm/platforms/cuda.py@v0.10.1, @v0.10.2 and @v0.11.0 pick FLASHINFER by default only when
is_device_capability(100) holds (exactly 10.0); vllm/utils/flashinfer.py@v0.12.0 asks the same
for sinks (supports_trtllm_attention), @v0.13.0 the whole 10.x family. B300/GB300 report 10.3.
The legacy chain sends an fp8 KV cache to TRITON_ATTN only from 0.11.0
(cuda.py@v0.11.0: `(has_sink or use_fp8_kv_cache) and not is_device_capability(90)`).
"""

from __future__ import annotations

import json
from dataclasses import replace

from checkfixtures import codes, deployment, finding, gpt_oss_120b, llama_like

from servepilot.checks import run_checks
from servepilot.engines.vllm.resolve import resolve


def _oss(tmp_path, version, cc, artifactory=True):
    dep = deployment(gpt_oss_120b(tmp_path / "oss"), cc=cc, n=8, version=version,
                     memory=180 * 2**30)
    return replace(dep, extra={"nvidia_artifactory": artifactory})


def test_legacy_b300_takes_triton_for_sinks_not_flashinfer(tmp_path):
    # 0.11.0 on 10.3: is_device_capability(100) is False, has_sink off 9.0 -> TRITON_ATTN
    result = run_checks(_oss(tmp_path, "0.11.0", (10, 3)))
    assert result.resolved["attention_backend"] == "TRITON_ATTN"
    assert "SP-ATTN-001" not in codes(result)


def test_legacy_b200_keeps_flashinfer(tmp_path):
    # the neighbour: exactly 10.0 takes FLASHINFER first (and its TRTLLM sinks)
    result = run_checks(_oss(tmp_path, "0.11.0", (10, 0)))
    assert result.resolved["attention_backend"] == "FLASHINFER"


def test_legacy_b300_offline_does_not_stop_on_flashinfer_sinks(tmp_path):
    # without the 10.0 branch FlashInfer's metadata builder never runs: no sinks raise
    result = run_checks(_oss(tmp_path, "0.10.2", (10, 3), artifactory=False))
    assert result.resolved["attention_backend"] == "TRITON_ATTN"
    b200 = run_checks(_oss(tmp_path, "0.10.2", (10, 0), artifactory=False))
    assert "does not support attention sinks" in finding(b200, "SP-ATTN-001").detail


def test_012_flashinfer_refuses_sinks_on_10_3(tmp_path):
    result = run_checks(_oss(tmp_path, "0.12.0", (10, 3)))
    assert result.resolved["attention_backend"] == "TRITON_ATTN"


def test_013_flashinfer_takes_sinks_on_the_10_x_family(tmp_path):
    result = run_checks(_oss(tmp_path, "0.13.0", (10, 3)))
    assert result.resolved["attention_backend"] == "FLASHINFER"


def _llama_fp8_kv(tmp_path, version):
    return deployment(llama_like(tmp_path / "llama"), cc=(8, 0), n=1, version=version,
                      memory=80 * 2**30, options={"kv_cache_dtype": "fp8"})


def test_0101_fp8_kv_cache_on_ampere_is_not_sent_to_triton(tmp_path):
    # 0.10.x's chain tests only has_sink: no TRITON_ATTN, so no fp8e4nv compile error
    result = run_checks(_llama_fp8_kv(tmp_path, "0.10.1"))
    assert result.resolved["attention_backend"] != "TRITON_ATTN"
    assert "SP-ATTN-001" not in codes(result)


def test_011_fp8_kv_cache_on_ampere_goes_to_triton_and_its_fp8e4nv(tmp_path):
    result = run_checks(_llama_fp8_kv(tmp_path, "0.11.0"))
    assert result.resolved["attention_backend"] == "TRITON_ATTN"
    assert "fp8e4nv" in finding(result, "SP-ATTN-001").detail


def _mimo(tmp_path, sink_bias: bool):
    # the keys vLLM's mimo_v2_flash.py@v0.14.1 reads for sinks; geometry kept small
    root = tmp_path / f"mimo-{sink_bias}"
    root.mkdir()
    config = {"architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash",
              "hidden_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 32,
              "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 8192,
              "vocab_size": 152064, "max_position_embeddings": 32768,
              "sliding_window": 128, "add_swa_attention_sink_bias": sink_bias,
              "torch_dtype": "bfloat16"}
    (root / "config.json").write_text(json.dumps(config))
    return root


def test_mimo_v2_flash_sinks_follow_its_config_flag(tmp_path):
    on = resolve(deployment(_mimo(tmp_path, True), cc=(8, 6), n=1, version="0.14.1"))
    off = resolve(deployment(_mimo(tmp_path, False), cc=(8, 6), n=1, version="0.14.1"))
    assert (on.has_sink, on.attention_backend) == (True, "TRITON_ATTN")
    assert (off.has_sink, off.attention_backend) == (False, "FLASH_ATTN")


def _env_backend(tmp_path, version, name):
    dep = deployment(gpt_oss_120b(tmp_path / "oss"), cc=(8, 6), n=1, version=version,
                     memory=48 * 2**30, env={"VLLM_ATTENTION_BACKEND": name})
    return run_checks(dep)


def test_011_refuses_the_010_spelling_of_the_triton_backend(tmp_path):
    # vllm/envs.py@v0.11.0: env_with_choices over _Backend, before any suffix is stripped
    f = finding(_env_backend(tmp_path, "0.11.0", "TRITON_ATTN_VLLM_V1"), "SP-ATTN-013")
    assert "Invalid value 'TRITON_ATTN_VLLM_V1' for VLLM_ATTENTION_BACKEND" in f.detail
    assert f.remedies[0].change == "VLLM_ATTENTION_BACKEND=TRITON_ATTN"


def test_010_takes_its_own_spelling_and_refuses_the_new_one(tmp_path):
    assert "SP-ATTN-013" not in codes(_env_backend(tmp_path, "0.10.2", "TRITON_ATTN_VLLM_V1"))
    f = finding(_env_backend(tmp_path, "0.10.2", "TRITON_ATTN"), "SP-ATTN-013")
    assert "Invalid attention backend: 'TRITON_ATTN'" in f.detail
    assert f.remedies[0].change == "VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1"


def test_names_are_case_sensitive_until_015_stops_reading_the_variable(tmp_path):
    assert "SP-ATTN-013" in codes(_env_backend(tmp_path, "0.14.1", "triton_attn"))
    assert "SP-ATTN-013" not in codes(_env_backend(tmp_path, "0.15.1", "triton_attn"))
