"""Every bundled example under examples/ inspects to the numbers its README promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepilot.checkpoint.estimate import estimate_param_bytes, estimate_params
from servepilot.checkpoint.inspect import inspect_path
from servepilot.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# directory -> what inspect must report (family, attention kind, layers, quant method/algo,
# declared_in, KV dtype and where, index total_size)
EXPECTED = {
    "kimi-k2.5-nvfp4": dict(family="deepseek_v3", kind="mla", layers=61, quant=("modelopt", "NVFP4"),
                            declared_in="config.json",
                            kv=("fp8", "config.json:quantization_config.kv_cache_scheme"), total=595_000_000_000),
    "deepseek-v3": dict(family="deepseek_v3", kind="mla", layers=61, quant=("fp8", "FP8_BLOCK"),
                        declared_in="config.json", kv=None, total=688_586_727_753),
    "llama-3.1-8b": dict(family="llama", kind="gqa", layers=32, quant=None, declared_in=None, kv=None,
                         total=16_060_522_496),
    "qwen3-235b-a22b-nvfp4": dict(family="qwen3_moe", kind="gqa", layers=94, quant=("modelopt", "NVFP4"),
                                  declared_in="hf_quant_config.json",
                                  kv=("fp8", "hf_quant_config.json:quantization.kv_cache_quant_algo"),
                                  total=134_101_359_616),
    "gpt-oss-120b": dict(family="gpt_oss", kind="hybrid", layers=36, quant=("mxfp4", "MXFP4"),
                         declared_in="config.json", kv=None, total=65_248_815_744),
}


def test_every_example_directory_is_covered():
    # examples/logs holds engine logs for triage, not a checkpoint
    dirs = {p.name for p in EXAMPLES.iterdir() if (p / "config.json").is_file()}
    assert dirs == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example(name):
    want = EXPECTED[name]
    spec = inspect_path(EXAMPLES / name)
    assert spec.family == want["family"]
    assert spec.attention.kind == want["kind"] and spec.attention.num_layers == want["layers"]
    if want["quant"] is None:
        assert spec.quant is None
    else:
        assert (spec.quant.method, spec.quant.quant_algo) == want["quant"]
        assert spec.quant.declared_in == want["declared_in"]
    if want["kv"] is None:
        assert spec.kv_cache is None
    else:
        assert (spec.kv_cache.dtype, spec.kv_cache.where) == want["kv"]
    index = json.loads((EXAMPLES / name / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert spec.weights.source == "index" and spec.weights.total_bytes == want["total"]
    assert spec.weights.shards == len(shards)
    assert estimate_param_bytes(spec) == want["total"]
    assert spec.unknown == () and spec.problems == ()


def test_kimi_has_both_declarations_and_custom_code():
    spec = inspect_path(EXAMPLES / "kimi-k2.5-nvfp4")
    assert [d.where for d in spec.quant.declarations] == ["config.json", "hf_quant_config.json"]
    assert spec.text_model_type == "deepseek_v3" and spec.model_type == "kimi_k25"
    assert spec.attention.mla_head_size == 576
    assert (spec.moe.num_experts, spec.moe.num_shared_experts, spec.moe.experts_per_token) == (384, 1, 8)
    names = {f.name: f for f in spec.custom_code.files}
    assert names["configuration_kimi_k25.py"].present and len(names["configuration_kimi_k25.py"].sha256) == 64
    assert names["modeling_kimi_k25.py"].present


def test_estimates_are_near_the_published_sizes():
    """The architecture estimate (used when only config.json is present) within 5% of each
    example's real total_size: a check on estimate.py, not a tautology (it ignores the index)."""
    import dataclasses

    for name, want in EXPECTED.items():
        spec = dataclasses.replace(inspect_path(EXAMPLES / name), weights=None)
        from servepilot.checkpoint.estimate import estimate_bytes_from_architecture

        guess = estimate_bytes_from_architecture(spec)
        assert abs(guess - want["total"]) / want["total"] < 0.05, (name, guess, want["total"])
        assert estimate_params(spec).total > 0


def test_cli_runs_on_an_example(capsys):
    assert main(["inspect", str(EXAMPLES / "kimi-k2.5-nvfp4")]) == 0
    out = capsys.readouterr().out
    assert "MLA" in out and "fp8 declared in config.json:quantization_config.kv_cache_scheme" in out
