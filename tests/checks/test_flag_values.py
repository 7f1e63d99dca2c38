"""Flag values outside the engine's choices or bounds fail `check` (SP-ARGS-002), per release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkfixtures import codes, deployment, llama_like
from hypothesis import given, settings
from hypothesis import strategies as st

from servepilot.checks import run_checks
from servepilot.engines.flaggen import value_rows_over_versions, vllm_values_of
from servepilot.engines.flagtable import load_value_rules, value_problems

# The values a skeptical user tried (issue 17, item 5): each passed `check` before.
REFUSED = [
    ({"gpu_memory_utilization": 1.5}, "0.16.0"),
    ({"gpu_memory_utilization": 0.0}, "0.16.0"),
    ({"port": 99999}, "0.16.0"),
    ({"port": 99999}, None),  # no version: the rules that hold for every release still apply
    ({"quantization": "nosuch"}, "0.16.0"),
    ({"quantization": "nosuch"}, "0.34.0"),
    ({"tensor_parallel_size": 0}, "0.16.0"),
    ({"tensor_parallel_size": 0}, "0.8.5"),  # older than the first release read: universal rule
    ({"dtype": "float64"}, "0.18.0"),
    ({"kv_cache_dtype": "fp4"}, "0.16.0"),
    ({"block_size": 48}, "0.16.0"),
]


@pytest.mark.parametrize("options,version", REFUSED)
def test_refused_values_fail_check(tmp_path, options, version):
    dep = deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1, version=version, options=options)
    result = run_checks(dep)
    assert "SP-ARGS-002" in codes(result)
    assert result.verdict == "fail"
    f = next(f for f in result.findings if f.code == "SP-ARGS-002")
    assert f.category == "other"
    assert result.findings[0].code.startswith("SP-ARGS")  # the engine stops there first
    dest = next(iter(options))
    assert f"--{dest.replace('_', '-')}" in f.detail


@pytest.mark.parametrize("options,version", [
    ({"gpu_memory_utilization": 1.0}, "0.16.0"),
    ({"gpu_memory_utilization": 0.95}, "0.34.0"),
    ({"port": 8001}, "0.16.0"),
    ({"quantization": "fp8"}, "0.16.0"),
    ({"dtype": "bfloat16"}, "0.18.0"),
    ({"block_size": 48}, "0.34.0"),  # 0.18+ takes any int block size
    ({"quantization": "nosuch"}, "0.8.5"),  # not read for that release: not condemned
    ({"port": "${PORT}"}, "0.16.0"),  # unknown here, not wrong
])
def test_accepted_values_pass(tmp_path, options, version):
    dep = deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1, version=version, options=options)
    assert "SP-ARGS-002" not in codes(run_checks(dep))


def test_only_flags_the_operator_typed_are_judged(tmp_path):
    dep = deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1, version="0.16.0")
    assert value_problems("vllm", "0.16.0", {"gpu_memory_utilization": 7}, dests=()) == []
    assert "SP-ARGS-002" not in codes(run_checks(dep))


def test_every_value_rule_has_a_source_and_a_range_or_choices():
    for package in ("vllm", "sglang", "llamacpp"):
        rules = load_value_rules(package)
        assert rules, package
        for r in rules:
            assert r.source and (r.choices or r.bounds), r


@settings(max_examples=150, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12))
def test_gpu_memory_utilization_bounds_match_the_engine(value):
    refused = value_problems("vllm", "0.16.0", {"gpu_memory_utilization": value}, {"gpu_memory_utilization"})
    assert bool(refused) == (not 0 < value <= 1)


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_port_bounds(value):
    refused = value_problems("sglang", None, {"port": value}, {"port"})
    assert bool(refused) == (not 0 <= value <= 65535)


def _fake_vllm(root: Path, literal: str, bound: str) -> Path:
    """A minimal tree shaped like a vLLM sdist: one config class, EngineArgs, an alias."""
    (root / "vllm/config").mkdir(parents=True)
    (root / "vllm/engine").mkdir(parents=True)
    (root / "vllm/config/cache.py").write_text(
        "from typing import Literal\nfrom pydantic import Field\n"
        f"CacheDType = Literal[{literal}]\n"
        "class CacheConfig:\n"
        f"    gpu_memory_utilization: float = Field(default=0.9, {bound})\n"
        "    cache_dtype: CacheDType = 'auto'\n"
    )
    (root / "vllm/engine/arg_utils.py").write_text(
        "class EngineArgs:\n"
        "    kv_cache_dtype: CacheDType = CacheConfig.cache_dtype\n"
        "    gpu_memory_utilization: float = CacheConfig.gpu_memory_utilization\n"
        "    plain: str | None = None\n"
    )
    return root


def test_flaggen_reads_choices_and_bounds_from_the_engine_source(tmp_path):
    old = vllm_values_of(_fake_vllm(tmp_path / "a", "'auto', 'fp8'", "gt=0, le=1"))
    new = vllm_values_of(_fake_vllm(tmp_path / "b", "'auto', 'fp8', 'nvfp4'", "gt=0, le=1"))
    assert old["kv_cache_dtype"] == ({"choices": ["auto", "fp8"]}, "vllm/config/cache.py")
    assert old["gpu_memory_utilization"] == ({"gt": 0, "le": 1}, "vllm/config/cache.py")
    assert "plain" not in old
    rows = value_rows_over_versions({"0.1.0": old, "0.2.0": new})
    kv = [r for r in rows if r["dest"] == "kv_cache_dtype"]
    assert [(r["versions"], len(r["choices"])) for r in kv] == [(">=0.1.0,<0.2.0", 2), (">=0.2.0", 3)]
    assert [r["versions"] for r in rows if r["dest"] == "gpu_memory_utilization"] == [">=0.1.0"]
    json.dumps(rows)  # the table is plain JSON
