"""GPTQ/AWQ groups against the tensor-parallel shard of row-parallel layers.

Facts: vllm/model_executor/layers/quantization/gptq.py and awq.py@v0.10.2 (create_weights:
input_size_per_partition % group_size -> 'The input size is not aligned ...'),
awq_marlin.py@v0.7.3 (a layer check_marlin_supports_layer refuses falls back to AWQConfig),
awq_marlin.py@v0.7.2 (no fallback: verify_marlin_supports_shape raises). Shapes: Qwen2-72B's
published config (hidden 8192, 64 heads, 8 KV heads, intermediate 29568).
"""

from __future__ import annotations

from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks

ALIGNED = "The input size is not aligned with the quantized weight shape"


def _qwen72(tmp_path, method="awq", group=128):
    quant = {"quant_method": method, "bits": 4, "group_size": group}
    if method == "awq":
        quant["version"] = "gemm"
    else:
        quant.update(desc_act=False, sym=True)
    return llama_like(tmp_path / f"{method}-{group}", heads=64, kv_heads=8, quant=quant,
                      intermediate=29568, model_type="qwen2", arch="Qwen2ForCausalLM")


def _run(path, version, cc=(8, 0), tp=2):
    return run_checks(deployment(path, cc=cc, n=tp, version=version, memory=80 * GIB))


def test_awq_marlin_falls_back_to_awq_and_its_groups_refuse_the_shard(tmp_path):
    # 29568 / 2 = 14784 rows into down_proj; 14784 % 128 = 64
    f = finding(_run(_qwen72(tmp_path), "0.10.2"), "SP-QUANT-006")
    assert ALIGNED in f.detail and "14784" in f.detail and f.category == "tp_divisibility"
    assert [r.change for r in f.remedies] == ["--tensor-parallel-size 1"]


def test_groups_of_64_fit_the_shard_and_awq_runs_what_marlin_cannot_tile(tmp_path):
    # the neighbour: 14784 % 64 == 0; Marlin's min_thread_k 128 refuses the layer, AWQ takes it
    result = _run(_qwen72(tmp_path, group=64), "0.10.2")
    assert "SP-QUANT-006" not in codes(result) and "SP-QUANT-004" not in codes(result)


def test_before_073_awq_marlin_raises_its_own_shape_error(tmp_path):
    result = _run(_qwen72(tmp_path, group=64), "0.7.2")
    assert "min_thread_k = 128" in finding(result, "SP-QUANT-004").detail
    assert "SP-QUANT-006" not in codes(result)


def test_gptq_below_marlin_runs_the_gptq_kernels_and_their_group_test(tmp_path):
    # compute capability 7.0: no Marlin (8.0 in 0.10.2), GPTQLinearMethod creates the weights
    f = finding(_run(_qwen72(tmp_path, method="gptq"), "0.10.2", cc=(7, 0)), "SP-QUANT-006")
    assert ALIGNED in f.detail


def test_a_split_that_holds_whole_groups_passes(tmp_path):
    # the neighbour: unsplit layers keep whole groups
    result = _run(_qwen72(tmp_path), "0.10.2", tp=1)
    assert "SP-QUANT-006" not in codes(result)


def _qwen3_moe_gptq(tmp_path):
    # Qwen3-30B-A3B's shapes (all 48 layers MoE, 128 experts of 768) as GPTQ 4-bit, group 128
    from checkfixtures import _write, qwen3_30b_a3b_config

    root = tmp_path / "qwen3-moe-gptq"
    root.mkdir()
    quant = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    _write(root, "config.json", qwen3_30b_a3b_config(quantization_config=quant))
    return root


def test_gptq_experts_marlin_cannot_tile_fall_back_to_moe_wna16_which_refuses_them(tmp_path):
    # 768 / 8 = 96 rows per expert and rank: check_moe_marlin_supports_layer wants % 128
    # (max(64, group_size)), so MoE WNA16 takes them; its CUDA kernel wants size_k % 128
    result = _run(_qwen3_moe_gptq(tmp_path), "0.10.2", tp=8)
    f = finding(result, "SP-QUANT-007")
    assert "size_k must divisible by BLOCK_SIZE_K" in f.detail and "= 96 rows" in f.detail
    assert "SP-QUANT-004" not in codes(result)


def test_expert_parallel_keeps_experts_whole_for_marlin(tmp_path):
    # the neighbour: --enable-expert-parallel, 768 rows per expert: Marlin tiles them
    result = run_checks(deployment(_qwen3_moe_gptq(tmp_path), cc=(8, 0), n=8, version="0.10.2",
                                   memory=80 * GIB, options={"enable_expert_parallel": True}))
    assert "SP-QUANT-004" not in codes(result) and "SP-QUANT-007" not in codes(result)


def test_before_085_no_fallback_so_the_experts_are_still_held_to_marlin_tiles(tmp_path):
    # 0.8.4's gptq_marlin has no check_moe_marlin_supports_layer, so the experts' shard is
    # still checked against Marlin (how 0.8.4's MoE Marlin then fails was not read)
    result = _run(_qwen3_moe_gptq(tmp_path), "0.8.4", tp=8)
    assert "moe_intermediate_size 768" in finding(result, "SP-QUANT-004").detail
