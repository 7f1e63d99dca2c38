"""SGLang and llama.cpp resolve: the facts the engine-neutral rules need."""

from __future__ import annotations

import json

from servepilot.checkpoint.inspect import inspect_path
from servepilot.checks import run_checks
from servepilot.deployment import Deployment
from servepilot.engines.command import EngineLaunch
from servepilot.engines.llamacpp.resolve import resolve as resolve_llamacpp
from servepilot.engines.sglang.resolve import resolve as resolve_sglang
from servepilot.hardware.cluster import Cluster, Gpu


def _dep(engine, options, *, spec=None, cc=(9, 0), version=None, n=1):
    gpus = tuple(Gpu(index=i, name="g", key="g", memory_bytes=80 * 2**30, compute_capability=cc) for i in range(n))
    launch = EngineLaunch(engine=engine, argv=(), program=engine, model=None, options=options, engine_version=version)
    return Deployment(launch=launch, cluster=Cluster(gpus=gpus, source="flag"), spec=spec)


def _nvfp4(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}))
    return inspect_path(root)


def test_sglang_kv_choices_per_version():
    assert not resolve_sglang(_dep("sglang", {"kv_cache_dtype": "bfloat16"}, version="0.5.2")).kv_valid
    assert resolve_sglang(_dep("sglang", {"kv_cache_dtype": "bfloat16"}, version="0.5.10")).kv_valid


def test_sglang_unread_version_is_said_unknown():
    res = resolve_sglang(_dep("sglang", {"kv_cache_dtype": "bfloat16"}, version="0.5.13"))
    assert res.kv_valid  # not refused on a guess
    assert any("unknown" in n for n in res.notes)
    assert any("0.5.13 itself was not read" in n for n in res.notes)


def test_sglang_kv_choices_per_release_line():
    # --kv-cache-dtype bfloat16 is a choice from 0.5.4 (server_args.py@v0.5.3.post3 lacks it)
    assert resolve_sglang(_dep("sglang", {"kv_cache_dtype": "bfloat16"}, version="0.5.6")).kv_valid
    assert not resolve_sglang(_dep("sglang", {"kv_cache_dtype": "bfloat16"}, version="0.5.3")).kv_valid
    # fp8_e4m3 arrived in 0.4.1
    assert not resolve_sglang(_dep("sglang", {"kv_cache_dtype": "fp8_e4m3"}, version="0.4.0")).kv_valid
    assert resolve_sglang(_dep("sglang", {"kv_cache_dtype": "fp8_e4m3"}, version="0.4.1")).kv_valid


def test_sglang_nvfp4_needs_blackwell(tmp_path):
    spec = _nvfp4(tmp_path)
    result = run_checks(_dep("sglang", {}, spec=spec, cc=(9, 0), version="0.5.10"))
    f = next(f for f in result.findings if f.code == "SP-QUANT-001")
    assert "Minimum capability: 100. Current capability: 90." in f.detail
    # vLLM serves the same checkpoint on SM90 through Marlin
    assert run_checks(_dep("vllm", {}, spec=spec, cc=(9,
                                                      0),
                           version="0.16.0")).resolved["quant_kernels"]["fallback"] is True


def test_llamacpp_quantized_v_cache():
    off = _dep("llama.cpp", {"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "off"})
    assert resolve_llamacpp(off).selection_error == "V cache quantization requires flash_attn"
    f = next(f for f in run_checks(off).findings if f.code == "SP-KV-003")
    assert f.severity == "error"
    unset = run_checks(_dep("llama.cpp", {"cache_type_k": "q8_0", "cache_type_v": "q8_0"}))
    assert next(f for f in unset.findings if f.code == "SP-KV-003").severity == "warning"
    on = run_checks(_dep("llama.cpp", {"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"}))
    assert "SP-KV-003" not in [f.code for f in on.findings]
    # a quantized K cache alone needs no flash attention
    k_only = run_checks(_dep("llama.cpp", {"cache_type_k": "q4_0"}))
    assert "SP-KV-003" not in [f.code for f in k_only.findings]


def test_llamacpp_unknown_cache_type():
    res = resolve_llamacpp(_dep("llama.cpp", {"cache_type_k": "q3_k"}))
    assert not res.kv_valid
