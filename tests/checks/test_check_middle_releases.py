"""vLLM 0.19-0.33, read from their sdists: the resolver's answers inside that range.

Each test asks one release on either side of a change pinned in the knowledge files, so a row
with the wrong boundary (or a range filled from the neighbours again) fails.
"""

from __future__ import annotations

import json

import pytest
from checkfixtures import deployment, kimi_like, llama_like, sparse_mla

from servepilot.engines.vllm.resolve import resolve

COMPRESSED_TENSORS_FP8_KV = {
    "quant_method": "compressed-tensors",
    "config_groups": {},
    "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True},
}


@pytest.mark.parametrize("version,order", [
    # before 0.24 SM12x falls into the generic list, whose first three need SM90/SM100
    ("0.20.0", ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE"]),
    # from 0.24 compute capability 12.x has its own MLA branch
    ("0.30.0", ["TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120"]),
])
def test_kimi_nvfp4_on_rtx_pro_6000_is_triton_mla_with_fp8_kv(tmp_path, version, order):
    res = resolve(deployment(kimi_like(tmp_path / "kimi"), cc=(12, 0), version=version))
    assert res.kv_cache_dtype == "fp8_e4m3"
    assert res.attention_backend == "TRITON_MLA" and res.selection_error is None
    assert [c.backend for c in res.candidates] == order
    assert not any("was not read" in note for note in res.notes)


@pytest.mark.parametrize("version,backend", [("0.23.0", None), ("0.24.0", "FLASHINFER_MLA_SPARSE_SM120")])
def test_sparse_mla_on_sm120_needs_the_024_branch(tmp_path, version, backend):
    res = resolve(deployment(sparse_mla(tmp_path / "v32"), cc=(12, 0), version=version))
    assert res.attention_backend == backend
    assert (res.selection_error is not None) == (backend is None)


@pytest.mark.parametrize("version,expected", [("0.21.0", "fp8"), ("0.22.0", "bfloat16")])
def test_explicit_kv_dtype_wins_over_compressed_tensors_from_022(tmp_path, version, expected):
    path = llama_like(tmp_path / "ct", quant=COMPRESSED_TENSORS_FP8_KV)
    res = resolve(deployment(path, cc=(9, 0), n=1, version=version, options={"kv_cache_dtype": "bfloat16"}))
    assert res.kv_cache_dtype == expected


def test_compressed_tensors_still_forces_fp8_on_auto(tmp_path):
    path = llama_like(tmp_path / "ct", quant=COMPRESSED_TENSORS_FP8_KV)
    assert resolve(deployment(path, cc=(9, 0), n=1, version="0.30.0")).kv_cache_dtype == "fp8"


@pytest.mark.parametrize("version,ok", [("0.26.0", False), ("0.27.0", True)])
def test_flash_attn_takes_fp8_kv_on_sm100_from_027(tmp_path, version, ok):
    opts = {"kv_cache_dtype": "fp8", "attention_backend": "FLASH_ATTN"}
    res = resolve(deployment(llama_like(tmp_path / "l"), cc=(10, 0), n=1, version=version, options=opts))
    assert (res.attention_backend == "FLASH_ATTN") == ok
    assert (res.selection_error is None) == ok


@pytest.mark.parametrize("version,backend", [("0.23.0", "FLASHINFER"), ("0.24.0", "TRITON_ATTN")])
def test_flashinfer_floor_raised_to_80_in_024(tmp_path, version, backend):
    # Turing (7.5): FLASH_ATTN needs 8.0; FlashInfer took 7.5 until 0.23
    res = resolve(deployment(llama_like(tmp_path / "l", dtype="float16"), cc=(7, 5), n=1, version=version))
    assert res.attention_backend == backend


@pytest.mark.parametrize("version,value,valid", [
    ("0.19.0", "nvfp4", False), ("0.20.0", "nvfp4", True),
    ("0.27.0", "nvfp4_4over6", False), ("0.28.0", "nvfp4_4over6", True),
    ("0.29.0", "nvfp4_ds_mla", False), ("0.30.0", "nvfp4_ds_mla", True),
])
def test_kv_cache_dtype_values_per_release(tmp_path, version, value, valid):
    res = resolve(deployment(llama_like(tmp_path / "l"), cc=(10,
                                                             0), n=1, version=version,
                             options={"kv_cache_dtype": value}))
    assert res.kv_valid == valid


GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "head_dim": 64,
           "num_attention_heads": 64, "num_key_value_heads": 8}


@pytest.mark.parametrize("version,backend", [("0.28.0", "TRITON_ATTN"), ("0.29.0", "FLASHINFER")])
def test_gpt_oss_sinks_on_sm120_reach_flashinfer_from_029(tmp_path, version, backend):
    path = llama_like(tmp_path / "oss", heads=64, kv_heads=8)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(config, **GPT_OSS)))
    res = resolve(deployment(path, cc=(12, 0), n=1, version=version))
    assert res.has_sink and res.attention_backend == backend


@pytest.mark.parametrize("version", ["0.18.0", "0.19.0"])
def test_sparse_mla_on_sm100_is_not_refused_for_an_unvalidated_default_block(tmp_path, version):
    # from 0.18 the selector validates only a user-given --block-size; the default 16 would
    # rule out every sparse backend (FLASHMLA_SPARSE takes 64 only)
    res = resolve(deployment(sparse_mla(tmp_path / "v32"), cc=(10, 0), version=version))
    assert res.selection_error is None and res.attention_backend == "FLASHMLA_SPARSE"
