"""SP-ATTN-004: SGLang's attention backend refusals as check findings, with remedies that work."""

from __future__ import annotations

import dataclasses

from checkfixtures import GIB, MLA_TEXT, _write, codes, deployment, finding, llama_like

from servepilot.checks import run_checks


def _mla(root):
    root.mkdir(parents=True, exist_ok=True)
    _write(root, "config.json", MLA_TEXT)
    return root


def _apply(dep, remedy):
    opts = {k: v for k, v in dep.launch.options.items() if k not in remedy.args["unset"]}
    opts.update(remedy.args["set"])
    return dataclasses.replace(dep, launch=dataclasses.replace(dep.launch, options=opts))


def test_trtllm_mla_on_sm120_is_an_error_with_sglangs_text_and_a_working_fix(tmp_path):
    dep = deployment(_mla(tmp_path / "ds"), cc=(12, 0), n=8, version="0.5.2", engine="sglang",
                     options={"attention_backend": "trtllm_mla", "tp_size": 8}, memory=96 * GIB)
    result = run_checks(dep)
    f = finding(result, "SP-ATTN-004")
    assert f.category == "attention_backend" and f.severity == "error"
    assert "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100)." in f.detail
    first = f.remedies[0]
    assert first.change == "drop --attention-backend"
    assert "SP-ATTN-004" not in codes(run_checks(_apply(dep, first)))
    assert all(r.change != "--attention-backend trtllm_mha" for r in f.remedies)  # MHA-only


def test_same_flag_is_accepted_on_sm120_by_0_5_10(tmp_path):
    dep = deployment(_mla(tmp_path / "ds"), cc=(12, 0), n=8, version="0.5.10.post1", engine="sglang",
                     options={"attention_backend": "trtllm_mla", "tp_size": 8})
    result = run_checks(dep)
    assert "SP-ATTN-004" not in codes(result)
    assert result.resolution.attention_backend == "trtllm_mla"
    assert result.resolution.block_size == 64  # SGLang forces page size 64 for trtllm_mla


def test_trtllm_mla_with_fp8_e5m2_is_a_kv_cache_dtype_finding(tmp_path):
    dep = deployment(_mla(tmp_path / "ds"), cc=(10, 0), n=8, version="0.5.2", engine="sglang",
                     options={"attention_backend": "trtllm_mla", "kv_cache_dtype": "fp8_e5m2", "tp_size": 8})
    f = finding(run_checks(dep), "SP-ATTN-004")
    assert f.category == "kv_cache_dtype"
    assert f.detail.count("TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3 or auto.") == 1
    assert f.remedies[0].change == "--kv-cache-dtype fp8_e4m3"


def test_default_backend_reported_without_a_finding(tmp_path):
    dep = deployment(llama_like(tmp_path / "l"), cc=(9, 0), n=1, version="0.5.2", engine="sglang",
                     options={"tp_size": 1}, memory=80 * GIB)
    result = run_checks(dep)
    assert "SP-ATTN-004" not in codes(result)
    assert result.resolution.attention_backend == "fa3"  # LlamaForCausalLM is an FA3-default arch


def test_unread_release_says_the_choice_is_not_modelled(tmp_path):
    dep = deployment(llama_like(tmp_path / "l"), cc=(12, 0), n=1, version="0.5.13", engine="sglang",
                     options={"attention_backend": "trtllm_mha", "tp_size": 1})
    res = run_checks(dep).resolution
    assert res.attention_backend is None and not res.fails
    assert any("not modelled" in n for n in res.notes)


def test_model_specific_architecture_names_no_backend_but_keeps_generic_refusals(tmp_path):
    root = tmp_path / "oss"
    root.mkdir()
    config = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": 201088,
              "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
              "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
              "max_position_embeddings": 131072, "num_local_experts": 32, "num_experts_per_tok": 4,
              "sliding_window": 128, "torch_dtype": "bfloat16"}
    _write(root, "config.json", config)
    dep = deployment(root, cc=(9, 0), n=1, version="0.5.10.post1", engine="sglang", options={"tp_size": 1})
    res = run_checks(dep).resolution
    assert res.attention_backend is None and not res.fails
    assert any("GptOssForCausalLM (model-specific rules)" in n for n in res.notes)
    dep = deployment(root, cc=(12, 0), n=1, version="0.5.10.post1", engine="sglang",
                     options={"tp_size": 1, "attention_backend": "trtllm_mha"})
    assert run_checks(dep).resolution.fails
