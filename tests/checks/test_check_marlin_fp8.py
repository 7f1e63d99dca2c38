"""FP8 weights on weight-only Marlin: per-shard tiles after the tensor-parallel split.

Facts: csrc/quantization/gptq_marlin/gptq_marlin_repack.cu@v0.10.2 (size_k % 16, size_n % 64),
gptq_marlin.cu@v0.10.2 (thread tiles (k, n) = (128, 64) / (64, 128) for the first GEMM),
marlin_utils_fp8.py@v0.10.2 (gate/up merged: the shard is their sum) and marlin_utils.py@v0.24.0
(marlin_padded_nk pads instead). GLM-4.5-Air's published shapes (zai-org/GLM-4.5-Air
config.json: hidden 4096, intermediate 10944, 128 experts of 1408, first layer dense) are the
text tower of GLM-4.5V.
"""

from __future__ import annotations

import json

from checkfixtures import GIB, codes, deployment, finding, qwen3_30b_a3b_config

from servepilot.checkpoint.inspect import inspect_path
from servepilot.checks import run_checks

FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}


def _air(tmp_path):
    root = tmp_path / "air"
    root.mkdir(exist_ok=True)
    config = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
              "num_hidden_layers": 46, "hidden_size": 4096, "num_attention_heads": 96,
              "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 10944,
              "vocab_size": 151552, "max_position_embeddings": 131072, "n_routed_experts": 128,
              "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 1408,
              "first_k_dense_replace": 1, "torch_dtype": "bfloat16", "quantization_config": FP8}
    (root / "config.json").write_text(json.dumps(config))
    return root


def _run(path, version, tp, cc=(8, 6), **options):
    return run_checks(deployment(path, cc=cc, n=tp, version=version, memory=48 * GIB,
                                 options=options or None))


def test_glm45_air_fp8_at_tp4_on_ampere_stops_at_the_merged_gate_up(tmp_path):
    # the engine line of a GLM-4.5V-FP8 launch on 4 x RTX A6000 (vLLM 0.10.2):
    # 2 x 10944 / 4 = 5472 output columns per rank, 5472 % 64 = 32
    f = finding(_run(_air(tmp_path), "0.10.2", 4), "SP-QUANT-003")
    assert "size_n = 5472 is not divisible by tile_n_size = 64" in f.detail
    assert f.category == "quantization_support" and "mlp.gate_up_proj" in f.title


def test_native_fp8_and_padding_releases_do_not_refuse(tmp_path):
    # neighbours: native FP8 on 8.9 never goes through Marlin; 0.24 pads the shard
    assert "SP-QUANT-003" not in codes(_run(_air(tmp_path), "0.10.2", 4, cc=(8, 9)))
    assert "SP-QUANT-003" not in codes(_run(_air(tmp_path), "0.24.0", 4))


def test_tp2_passes_the_repack_but_no_gemm_tile_fits_the_down_projection(tmp_path):
    # 10944 / 2 = 5472 rows into down_proj: 5472 % 16 == 0 (repack) but 5472 % 64 == 32
    f = finding(_run(_air(tmp_path), "0.10.2", 2), "SP-QUANT-003")
    assert "Invalid thread config" in f.detail and "(5472, 4096)" in f.detail
    assert "memory profiling" in f.detail


def test_tp1_tiles_and_is_the_remedy_offered(tmp_path):
    result = _run(_air(tmp_path), "0.10.2", 4)
    flags = [r.change for r in finding(result, "SP-QUANT-003").remedies if r.kind == "flag"]
    assert flags == ["--tensor-parallel-size 1"]


def _qwen_moe(tmp_path, moe_intermediate):
    root = tmp_path / f"qwen-{moe_intermediate}"
    root.mkdir()
    config = qwen3_30b_a3b_config(moe_intermediate, quantization_config=FP8)
    (root / "config.json").write_text(json.dumps(config))
    return root


def test_expert_shard_off_the_tile_stops_the_moe_repack(tmp_path):
    # 1440 / 4 = 360 per expert and rank: w13 has 720 columns, 720 % 64 = 16
    f = finding(_run(_qwen_moe(tmp_path, 1440), "0.10.2", 4), "SP-QUANT-003")
    assert "size_n = 720 is not divisible by tile_n_size = 64" in f.detail
    assert "experts (w13)" in f.title


def test_expert_parallel_keeps_experts_whole_and_they_tile(tmp_path):
    result = _run(_qwen_moe(tmp_path, 1440), "0.10.2", 4, enable_expert_parallel=True)
    assert "SP-QUANT-003" not in codes(result)


def _glm45v(tmp_path):
    # GLM-4.5V's layout: a GLM-4.5-Air text tower under text_config beside a vision tower
    # (zai-org/GLM-4.5V config.json; the vision numbers only add ~1B parameters)
    root = tmp_path / "glm45v"
    root.mkdir()
    text = json.loads((_air(tmp_path) / "config.json").read_text())
    text.pop("quantization_config")
    text["model_type"] = "glm4v_moe_text"
    del text["architectures"]
    config = {"architectures": ["Glm4vMoeForConditionalGeneration"], "model_type": "glm4v_moe",
              "text_config": text, "torch_dtype": "bfloat16", "quantization_config": FP8,
              "vision_config": {"model_type": "glm4v_moe", "depth": 24, "hidden_size": 1536,
                                "intermediate_size": 10944, "num_heads": 12,
                                "out_hidden_size": 4096, "patch_size": 14}}
    (root / "config.json").write_text(json.dumps(config))
    return root


def test_glm45v_fp8_weights_are_the_air_tower_in_one_byte_and_marlin_stops_it(tmp_path):
    # dev row glm-v-178: the FP8 checkpoint is ~108 GB, 27 GB per rank at TP 4 on 48 GB
    # A6000s; what stops it is the Marlin repack, not memory (82.62 GiB per GPU came from
    # the bench rebuilding the 355B GLM-4.5 for the name "glm-4.5v")
    path = _glm45v(tmp_path)
    assert 100e9 < inspect_path(path).weights.total_bytes < 115e9
    result = _run(path, "0.10.2", 4)
    assert "SP-MEM-001" not in codes(result)
    assert "size_n = 5472" in result.findings[0].detail
