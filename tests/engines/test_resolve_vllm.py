"""vllm.resolve against the engine rules read from its source: KV dtype derivation and backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepilot.checkpoint.inspect import inspect_path
from servepilot.deployment import Deployment
from servepilot.engines.command import EngineLaunch, ShellContext
from servepilot.engines.vllm.resolve import resolve, resolve_with
from servepilot.hardware.cluster import Cluster, Gpu

MLA = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
       "intermediate_size": 18432,
       "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
       "n_routed_experts": 256, "num_experts_per_tok": 8, "kv_lora_rank": 512, "q_lora_rank": 1536,
       "qk_rope_head_dim": 64,
       "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
       "torch_dtype": "bfloat16"}
GQA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
       "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
       "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


def _checkpoint(root: Path, config: dict, hf_quant: dict | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    if hf_quant is not None:
        (root / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    return root


def _dep(path, *, cc=(12, 0), version="0.16.0", options=None, env=None):
    gpus = tuple(Gpu(index=i, name="g", key="g", memory_bytes=96 * 2**30, compute_capability=cc) for i in range(8))
    launch = EngineLaunch(engine="vllm", argv=(), program="vllm serve", model=str(path), options=dict(options or {}),
                          shell=ShellContext(env=dict(env or {})), engine_version=version)
    return Deployment(launch=launch, cluster=Cluster(gpus=gpus, source="flag"), spec=inspect_path(path))


def _modelopt(kv) -> dict:
    qc = {"quant_method": "modelopt", "quant_algo": "FP8"}
    if kv is not None:
        qc["kv_cache_scheme" if isinstance(kv, dict) else "kv_cache_quant_algo"] = kv
    return qc


@pytest.mark.parametrize("kv,expected", [
    ({"dynamic": False, "num_bits": 8, "type": "float"}, "fp8_e4m3"),  # dict -> "fp8" -> map -> fp8_e4m3
    ("FP8", "fp8_e4m3"),  # string, lower-cased, mapped
    ({"num_bits": 8, "type": "float"}, "auto"),  # no dynamic: False -> warning and auto
    ("INT8", "auto"),  # unknown string -> auto
    (None, "auto"),
])
def test_modelopt_kv_auto(tmp_path, kv, expected):
    res = resolve(_dep(_checkpoint(tmp_path / "m", dict(GQA, quantization_config=_modelopt(kv))), cc=(9, 0)))
    assert res.kv_cache_dtype == expected


def test_auto_does_not_follow_the_checkpoint_before_014(tmp_path):
    path = _checkpoint(tmp_path / "m", dict(GQA, quantization_config=_modelopt("FP8")))
    assert resolve(_dep(path, cc=(9, 0), version="0.13.0")).kv_cache_dtype == "auto"
    assert resolve(_dep(path, cc=(9, 0), version="0.14.1")).kv_cache_dtype == "fp8_e4m3"


def test_hf_quant_config_read_only_without_config_json_quant(tmp_path):
    hfq = {"producer": {"name": "modelopt",
                        "version": "0.29.0"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}
    only_hf = _checkpoint(tmp_path / "a", GQA, hfq)
    res = resolve(_dep(only_hf, cc=(10, 0)))
    assert res.kv_cache_dtype == "fp8_e4m3"
    assert any("hf_quant_config.json" in e.fact for e in res.kv_evidence)
    both = _checkpoint(tmp_path / "b",
                       dict(GQA, quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4"}), hfq)
    assert resolve(_dep(both, cc=(10, 0))).kv_cache_dtype == "auto"  # config.json wins, it has no KV scheme


def test_explicit_value_wins_for_mla(tmp_path):
    path = _checkpoint(tmp_path / "m", dict(MLA, quantization_config=_modelopt("FP8")))
    res = resolve(_dep(path, options={"kv_cache_dtype": "bfloat16"}))
    assert res.kv_cache_dtype == "bfloat16" and res.attention_backend == "TRITON_MLA"


def test_compressed_tensors_forces_fp8_on_non_mla_in_016(tmp_path):
    qc = {"quant_method": "compressed-tensors",
          "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"},
          "config_groups": {}}
    path = _checkpoint(tmp_path / "m", dict(GQA, quantization_config=qc))
    res = resolve(_dep(path, cc=(9, 0), options={"kv_cache_dtype": "bfloat16"}))
    assert res.kv_cache_dtype == "fp8" and res.non_mla_kv_forced == "fp8"
    assert resolve(_dep(path, cc=(9,
                                  0), version="0.14.1",
                        options={"kv_cache_dtype": "bfloat16"})).kv_cache_dtype == "bfloat16"


def test_sparse_v32_maps_fp8_to_ds_mla(tmp_path):
    path = _checkpoint(tmp_path / "m",
                       dict(MLA, architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32", index_topk=2048))
    res = resolve(_dep(path, cc=(9, 0), options={"kv_cache_dtype": "fp8"}))
    assert res.kv_cache_dtype == "fp8_ds_mla" and res.attention_backend == "FLASHMLA_SPARSE"


def test_legacy_011_picks_triton_mla_then_its_impl_refuses_fp8(tmp_path):
    path = _checkpoint(tmp_path / "m", MLA)
    res = resolve(_dep(path, version="0.11.0", options={"kv_cache_dtype": "fp8"}))
    assert res.selection_mode == "legacy" and res.attention_backend == "TRITON_MLA"
    assert res.selection_error.startswith("NotImplementedError")


def test_sm100_defaults_to_flashinfer_mla_in_016(tmp_path):
    res = resolve(_dep(_checkpoint(tmp_path / "m", MLA), cc=(10, 0)))
    assert res.attention_backend == "FLASHINFER_MLA" and res.block_size == 64
    assert resolve(_dep(_checkpoint(tmp_path / "n",
                                    MLA), cc=(10, 0), version="0.14.1")).attention_backend == "CUTLASS_MLA"


def test_hopper_bf16_prefers_flash_attn_mla(tmp_path):
    assert resolve(_dep(_checkpoint(tmp_path / "m", MLA), cc=(9, 0))).attention_backend == "FLASH_ATTN_MLA"


def test_resolve_with_changes_one_thing(tmp_path):
    path = _checkpoint(tmp_path / "m", dict(MLA, quantization_config=_modelopt("FP8")))
    dep = _dep(path)
    assert resolve(dep).fails
    assert not resolve_with(dep, kv_cache_dtype="bfloat16").fails
    assert resolve_with(dep, engine_version="0.18.0").attention_backend == "TRITON_MLA"
    assert dep.launch.options == {}  # the original is untouched


def test_gpt_oss_sinks_need_hopper_flash_attention(tmp_path):
    cfg = dict(GQA, architectures=["GptOssForCausalLM"], model_type="gpt_oss", num_attention_heads=64, head_dim=64,
               hidden_size=2880)
    path = _checkpoint(tmp_path / "m", cfg)
    assert resolve(_dep(path, cc=(9, 0))).attention_backend == "FLASH_ATTN"
    ampere = resolve(_dep(path, cc=(8, 0)))
    assert ampere.attention_backend == "TRITON_ATTN"
    assert "sink setting not supported" in dict((c.backend, c.reasons) for c in ampere.candidates)["FLASH_ATTN"]


def test_unknown_gpu_resolves_kv_but_no_backend(tmp_path):
    path = _checkpoint(tmp_path / "m", GQA)
    launch = EngineLaunch(engine="vllm", argv=(), program="vllm serve", model=str(path), engine_version="0.16.0")
    res = resolve(Deployment(launch=launch, cluster=Cluster(), spec=inspect_path(path)))
    assert res.attention_backend is None and not res.fails
    assert any("compute capability is unknown" in n for n in res.notes)


def test_a_backend_without_facts_is_not_guessed(tmp_path):
    res = resolve(_dep(_checkpoint(tmp_path / "m", GQA), cc=(9, 0), options={"attention_backend": "TREE_ATTN"}))
    assert res.attention_backend == "TREE_ATTN" and not res.fails
    assert any("no facts for attention backend TREE_ATTN" in n for n in res.notes)
