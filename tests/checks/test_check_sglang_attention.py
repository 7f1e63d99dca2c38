"""SP-ATTN-004: SGLang's attention backend refusals as check findings, with remedies that work."""

from __future__ import annotations

import dataclasses

import pytest
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


@pytest.mark.parametrize("version,cc", [("0.5.24", (12, 0)), ("0.3.6", (9, 0))])
def test_unread_release_is_a_named_unknown_not_a_guess(tmp_path, version, cc):
    dep = deployment(llama_like(tmp_path / "l"), cc=cc, n=1, version=version, engine="sglang",
                     options={"attention_backend": "trtllm_mha", "tp_size": 1}, memory=96 * GIB)
    result = run_checks(dep)
    res = result.resolution
    assert res.attention_backend is None and not res.fails
    assert any("not modelled" in n for n in res.notes)
    assert result.verdict == "unknown"
    unknown = [u for u in result.unknowns if u.fact == "attention backend"]
    assert unknown and f"SGLang {version}" in unknown[0].why and "0.4.0 to 0.5.23" in unknown[0].why


def test_read_release_names_its_backend_and_no_unknown(tmp_path):
    dep = deployment(llama_like(tmp_path / "l"), cc=(12, 0), n=1, version="0.5.23", engine="sglang",
                     options={"tp_size": 1}, memory=96 * GIB)
    result = run_checks(dep)
    assert result.resolution.attention_backend == "flashinfer"
    assert not [u for u in result.unknowns if u.fact == "attention backend"]


# --- facts read for 0.4.0-0.4.5 and 0.5.12-0.5.23: a failing and a passing launch each -------

def _llama(tmp_path, version, cc, **options):
    return deployment(llama_like(tmp_path / "l"), cc=cc, n=1, version=version, engine="sglang",
                      options={"tp_size": 1, **options}, memory=96 * GIB)


def _deepseek(tmp_path, version, cc, **options):
    return deployment(_mla(tmp_path / "ds"), cc=cc, n=8, version=version, engine="sglang",
                      options={"tp_size": 8, **options}, memory=96 * GIB)


def test_0_4_4_fa3_needs_sm90(tmp_path):
    f = finding(run_checks(_llama(tmp_path, "0.4.4.post4", (8, 6), attention_backend="fa3")),
                "SP-ATTN-004")
    assert f.category == "attention_backend" and "requires SM>=90" in f.detail
    assert "model_runner.py@v0.4.4.post4" in " ".join(e.source for e in f.evidence)
    passing = run_checks(_llama(tmp_path, "0.4.4.post4", (9, 0), attention_backend="fa3"))
    assert "SP-ATTN-004" not in codes(passing)
    assert passing.resolution.attention_backend == "fa3"


def test_0_4_3_has_no_fa3_choice_and_puts_mla_on_triton(tmp_path):
    f = finding(run_checks(_llama(tmp_path, "0.4.3", (9, 0), attention_backend="fa3")),
                "SP-ATTN-004")
    assert "invalid choice: 'fa3'" in f.detail
    passing = run_checks(_deepseek(tmp_path, "0.4.3", (9, 0), attention_backend="flashinfer"))
    assert "SP-ATTN-004" not in codes(passing)
    assert passing.resolution.attention_backend == "triton"


def test_0_5_18_refuses_trtllm_mha_on_sm120_and_0_5_19_accepts_it(tmp_path):
    f = finding(run_checks(_llama(tmp_path, "0.5.18", (12, 0), attention_backend="trtllm_mha")),
                "SP-ATTN-004")
    assert f.category == "attention_backend" and "(SM100)" in f.detail
    passing = run_checks(_llama(tmp_path, "0.5.19", (12, 0), attention_backend="trtllm_mha"))
    assert "SP-ATTN-004" not in codes(passing)
    assert passing.resolution.attention_backend == "trtllm_mha"


def test_0_5_19_trtllm_mha_on_sm120_refuses_an_fp8_e4m3_cache(tmp_path):
    dep = _llama(tmp_path, "0.5.19", (12, 0), attention_backend="trtllm_mha",
                 kv_cache_dtype="fp8_e4m3")
    f = finding(run_checks(dep), "SP-ATTN-004")
    assert f.category == "kv_cache_dtype"
    assert "TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3 KV cache" in f.detail
    assert "SP-ATTN-004" not in codes(run_checks(_apply(dep, f.remedies[0])))
    on_b200 = _llama(tmp_path, "0.5.19", (10, 0), attention_backend="trtllm_mha",
                     kv_cache_dtype="fp8_e4m3")
    assert "SP-ATTN-004" not in codes(run_checks(on_b200))


def test_0_5_21_trtllm_mla_drops_fp4_kv_which_0_5_20_takes(tmp_path):
    failing = run_checks(_deepseek(tmp_path, "0.5.21", (10, 0), attention_backend="trtllm_mla",
                                   kv_cache_dtype="fp4_e2m1"))
    assert {"kv_cache_dtype"} == {f.category for f in failing.errors}
    passing = run_checks(_deepseek(tmp_path, "0.5.20", (10, 0), attention_backend="trtllm_mla",
                                   kv_cache_dtype="fp4_e2m1"))
    assert "SP-ATTN-004" not in codes(passing)
    assert passing.resolution.attention_backend == "trtllm_mla"


def test_cutedsl_mla_needs_sm100_from_0_5_13(tmp_path):
    f = finding(run_checks(_deepseek(tmp_path, "0.5.16", (12, 0), attention_backend="cutedsl_mla")),
                "SP-ATTN-004")
    assert "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100)." in f.detail
    passing = run_checks(_deepseek(tmp_path, "0.5.16", (10, 0), attention_backend="cutedsl_mla"))
    assert "SP-ATTN-004" not in codes(passing)
    assert passing.resolution.block_size == 64


def test_0_5_23_deepseek_on_b200_defaults_to_trtllm_mla(tmp_path):
    # arg_groups/model_overrides/deepseek_v2.py: no backend named, SM100 -> trtllm_mla, which
    # takes no fp8_e5m2 cache
    failing = run_checks(_deepseek(tmp_path, "0.5.23", (10, 0), kv_cache_dtype="fp8_e5m2"))
    assert finding(failing, "SP-ATTN-004").category == "kv_cache_dtype"
    passing = run_checks(_deepseek(tmp_path, "0.5.23", (10, 0)))
    assert "SP-ATTN-004" not in codes(passing)
    assert (passing.resolution.attention_backend, passing.resolution.block_size) == ("trtllm_mla", 64)


def test_split_decode_backend_is_judged_on_a_modelled_release(tmp_path):
    dep = _deepseek(tmp_path, "0.5.20", (9, 0), decode_attention_backend="trtllm_mla")
    f = finding(run_checks(dep), "SP-ATTN-007")
    assert "--decode-attention-backend trtllm_mla" in f.title
    ok = _deepseek(tmp_path, "0.5.20", (10, 0), decode_attention_backend="trtllm_mla")
    assert "SP-ATTN-007" not in codes(run_checks(ok))
    # --attention-backend alone on a modelled line: SP-ATTN-004 speaks, not both
    both = run_checks(_deepseek(tmp_path, "0.5.20", (9, 0), attention_backend="trtllm_mla"))
    assert "SP-ATTN-004" in codes(both) and "SP-ATTN-007" not in codes(both)


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


def test_0_5_17_reads_v_head_dim_from_the_config_for_its_sm100_default(tmp_path):
    import json

    root = llama_like(tmp_path / "l")
    config = json.loads((root / "config.json").read_text())
    head = config["hidden_size"] // config["num_attention_heads"]
    (root / "config.json").write_text(json.dumps({**config, "head_dim": head,
                                                  "v_head_dim": head // 2}))
    for version, want in (("0.5.17", ("fa4", 128)), ("0.5.16", ("trtllm_mha", 64))):
        dep = deployment(root, cc=(10, 0), n=1, version=version, engine="sglang",
                         options={"tp_size": 1}, memory=96 * GIB)
        res = run_checks(dep).resolution
        assert (res.attention_backend, res.block_size) == want


def test_0_4_5_gemma2_with_fp8_e5m2_on_hopper_meets_tritons_window_assert(tmp_path):
    root = tmp_path / "gemma2"
    root.mkdir()
    _write(root, "config.json", {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 256000,
        "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "sliding_window": 4096, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"})
    dep = deployment(root, cc=(9, 0), n=1, version="0.4.5.post3", engine="sglang",
                     options={"tp_size": 1, "kv_cache_dtype": "fp8_e5m2"}, memory=80 * GIB)
    f = finding(run_checks(dep), "SP-ATTN-004")
    assert f.category == "attention_backend"
    assert "Window attention is not supported in the triton attention backend." in f.detail
    fixed = run_checks(_apply(dep, f.remedies[0]))
    assert "SP-ATTN-004" not in codes(fixed)
    plain = deployment(root, cc=(9, 0), n=1, version="0.4.5.post3", engine="sglang",
                       options={"tp_size": 1}, memory=80 * GIB)
    assert run_checks(plain).resolution.attention_backend == "fa3"
