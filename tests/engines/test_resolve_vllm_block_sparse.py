"""vllm.resolve on each side of the 0.16-0.34 changes to block size, SM100 forcing and sparse MLA KV dtype."""

from __future__ import annotations

import json
from pathlib import Path

from servepilot.checkpoint.inspect import inspect_path
from servepilot.deployment import Deployment
from servepilot.engines.command import EngineLaunch, ShellContext
from servepilot.engines.vllm.resolve import preferred_block_size, resolve
from servepilot.hardware.cluster import Cluster, Gpu

MLA = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
       "intermediate_size": 18432,
       "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
       "n_routed_experts": 256, "num_experts_per_tok": 8, "kv_lora_rank": 512, "q_lora_rank": 1536,
       "qk_rope_head_dim": 64,
       "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
       "torch_dtype": "bfloat16"}
SPARSE = dict(MLA, architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32", index_topk=2048)


def _resolve(tmp_path: Path, config: dict, *, cc, version, options=None):
    root = tmp_path / "m"
    if not root.exists():
        root.mkdir()
        (root / "config.json").write_text(json.dumps(config))
    gpus = tuple(Gpu(index=i, name="g", key="g", memory_bytes=96 * 2**30, compute_capability=cc) for i in range(8))
    launch = EngineLaunch(engine="vllm", argv=(), program="vllm serve", model=str(root), options=dict(options or {}),
                          shell=ShellContext(env={}), engine_version=version)
    return resolve(Deployment(launch=launch, cluster=Cluster(gpus=gpus, source="flag"), spec=inspect_path(root)))


def test_preferred_block_size_is_the_default_when_taken_else_the_smallest():
    assert preferred_block_size([{"multiple_of": 16}], 16) == 16
    assert preferred_block_size([32, 64], 16) == 32
    assert preferred_block_size([32, 64], 64) == 64
    assert preferred_block_size([128], 64) == 128
    assert preferred_block_size([], 16) == 16


def test_hopper_mla_block_forced_to_64_until_017_then_the_backends_own(tmp_path):
    old = _resolve(tmp_path, MLA, cc=(9, 0), version="0.17.0")
    new = _resolve(tmp_path, MLA, cc=(9, 0), version="0.18.0")
    assert old.attention_backend == new.attention_backend == "FLASH_ATTN_MLA"
    assert old.block_size == 64  # check_and_update_config on Hopper
    assert new.block_size == 16  # FLASH_ATTN_MLA takes the default 16


def test_sm100_flashinfer_mla_prefers_32_until_033_and_64_from_034(tmp_path):
    v033 = _resolve(tmp_path, MLA, cc=(10, 0), version="0.33.0")
    v034 = _resolve(tmp_path, MLA, cc=(10, 0), version="0.34.0")
    assert v033.attention_backend == v034.attention_backend == "FLASHINFER_MLA"
    assert (v033.block_size, v034.block_size) == (32, 64)


def test_forced_cutlass_mla_gets_128_on_018(tmp_path):
    res = _resolve(tmp_path, MLA, cc=(10, 0), version="0.18.0", options={"attention_backend": "CUTLASS_MLA"})
    assert res.attention_backend == "CUTLASS_MLA" and res.block_size == 128 and not res.fails


def test_block_size_is_validated_only_when_given_from_018(tmp_path):
    implicit = _resolve(tmp_path, MLA, cc=(10, 0), version="0.18.0")
    given = _resolve(tmp_path, MLA, cc=(10, 0), version="0.18.0", options={"block_size": 16})
    assert implicit.attention_backend == "FLASHINFER_MLA"
    assert all("block_size not supported" not in c.reasons for c in implicit.candidates)
    assert given.block_size == 16
    assert "block_size not supported" in dict((c.backend, c.reasons) for c in given.candidates)["FLASHINFER_MLA"]
    assert given.attention_backend != "FLASHINFER_MLA"


def test_sm100_default_forcing_ends_after_017(tmp_path):
    old = _resolve(tmp_path, MLA, cc=(10, 0), version="0.17.0")
    new = _resolve(tmp_path, MLA, cc=(10, 0), version="0.18.0")
    assert old.forced_backend == "FLASHINFER_MLA" and "SM100 default" in old.forced_by and old.block_size == 64
    assert new.forced_backend is None and new.forced_by is None
    assert new.attention_backend == "FLASHINFER_MLA"  # first in the SM10x list, chosen on its merits
    assert [c.backend for c in new.candidates][0] == "FLASHINFER_MLA"


def test_sparse_fp8_maps_before_selection_until_017_and_after_from_018(tmp_path):
    old = _resolve(tmp_path, SPARSE, cc=(9, 0), version="0.17.0", options={"kv_cache_dtype": "fp8"})
    new = _resolve(tmp_path, SPARSE, cc=(9, 0), version="0.18.0", options={"kv_cache_dtype": "fp8"})
    assert old.attention_backend == new.attention_backend == "FLASHMLA_SPARSE"
    assert old.kv_cache_dtype == new.kv_cache_dtype == "fp8_ds_mla"
    assert not any("was chosen for sparse MLA" in e.fact for e in old.kv_evidence)
    assert any("FLASHMLA_SPARSE was chosen for sparse MLA" in e.fact for e in new.kv_evidence)
    assert new.block_size == 64  # FLASHMLA_SPARSE only takes 64


def test_sm100_fp8_sparse_prefers_flashinfer_mla_sparse_from_019(tmp_path):
    v018 = _resolve(tmp_path, SPARSE, cc=(10, 0), version="0.18.0", options={"kv_cache_dtype": "fp8"})
    v019 = _resolve(tmp_path, SPARSE, cc=(10, 0), version="0.19.0", options={"kv_cache_dtype": "fp8"})
    assert (v018.attention_backend, v018.kv_cache_dtype) == ("FLASHMLA_SPARSE", "fp8_ds_mla")
    # FLASHINFER_MLA_SPARSE keeps the standard fp8 cache: no conversion
    assert (v019.attention_backend, v019.kv_cache_dtype) == ("FLASHINFER_MLA_SPARSE", "fp8")
    assert v019.block_size == 32
    bf16 = _resolve(tmp_path, SPARSE, cc=(10, 0), version="0.19.0")
    assert bf16.attention_backend == "FLASHMLA_SPARSE"  # 128 heads, no fp8: the head-count order


def test_sm120_sparse_backend_converts_auto_from_024(tmp_path):
    forced = {"attention_backend": "FLASHINFER_MLA_SPARSE_SM120"}
    v023 = _resolve(tmp_path, SPARSE, cc=(12, 0), version="0.23.0", options=forced)
    v024 = _resolve(tmp_path, SPARSE, cc=(12, 0), version="0.24.0", options=forced)
    assert v023.kv_cache_dtype == "auto"
    assert v024.kv_cache_dtype == "fp8_ds_mla" and v024.kv_cache_storage == "fp8_ds_mla"


def test_017_forces_flashinfer_mla_and_adjusts_a_given_block_size(tmp_path):
    given16 = _resolve(tmp_path, MLA, cc=(10, 0), version="0.17.0", options={"block_size": 16})
    given32 = _resolve(tmp_path, MLA, cc=(10, 0), version="0.17.0", options={"block_size": 32})
    assert given16.forced_backend == "FLASHINFER_MLA" and given16.block_size == 64
    assert given32.forced_backend == "FLASHINFER_MLA" and given32.block_size == 32
    # 0.18 keeps and validates the given 16, which FLASHINFER_MLA rejects
    assert _resolve(tmp_path, MLA, cc=(10, 0), version="0.18.0", options={"block_size": 16}).forced_backend is None
