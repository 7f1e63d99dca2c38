"""SP-GGUF-004: a MoE GGUF with more experts than the build's LLAMA_MAX_EXPERTS aborts the load
(GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS), llama.cpp's model loader); the limit is read
per build into engines/llamacpp/knowledge/build_facts.json (tools/llamacpp_build_facts.py)."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from servepilot.cli.main import main
from servepilot.engines.llamacpp import build_facts

_TOOL = Path(__file__).resolve().parents[2] / "tools" / "llamacpp_build_facts.py"
_PY_SERVER = ("python", "-m", "llama_cpp.server", "--model")


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("llamacpp_build_facts_t", _TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _moe_gguf(path, experts: int, arch="qwen2moe"):
    """A tiny real GGUF of a MoE architecture every build read knows, with `experts` experts."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_feed_forward_length(128)
    w.add_expert_count(experts)
    w.add_expert_used_count(min(8, experts))
    w.add_tensor("token_embd.weight", np.zeros((256, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _check(capsys, model, *version, program=("llama-server", "-m")):
    args = ["check", "--json", "--gpu", "h100"]
    if version:
        args += ["--engine-version", version[0]]
    rc = main(args + ["--", *program, str(model), "-c", "2048"])
    return rc, json.loads(capsys.readouterr().out)


def _codes(obj, code="SP-GGUF-004"):
    return [f for f in obj["findings"] if f["code"] == code]


def _reads(table):
    return [(s["key"], s["max_experts"]) for s in build_facts.facts()[table]["snapshots"]
            if "max_experts" in s]


# ------------------------------------------------------------------ the tool and its reads


def test_the_tool_reads_the_define_and_not_a_mention(tool):
    # src/llama-hparams.h@4227c9be4 (llama-cpp-python 0.3.16) spells it with a comment after
    assert tool.max_experts("#define LLAMA_MAX_EXPERTS 384  // Kimi-K2\n") == 384
    assert tool.max_experts("GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS);\n") is None


@pytest.mark.parametrize("table", ["llama_cpp", "llama_cpp_python"])
def test_the_limit_is_read_in_builds_of_every_era_and_only_grew(table):
    reads = _reads(table)
    assert len(reads) >= 8
    limits = [v for _k, v in reads if v is not None]
    # the judge assumes a build newer than the last read keeps at least its limit
    assert limits == sorted(limits) and limits[0] <= 8 and limits[-1] >= 512


def test_the_limits_read_are_the_sdists_own():
    # verified by hand in the unpacked sdists: llama.cpp@8733e0cf6 src/llama-hparams.h:9 (256,
    # DeepSeekV3) and llama.cpp@4227c9be4 (384, Kimi-K2); llama.cpp@c2101a2e9 llama.cpp:105 (8)
    reads = dict(_reads("llama_cpp_python"))
    assert (reads["0.2.56"], reads["0.3.9"], reads["0.3.16"]) == (8, 256, 384)


# ------------------------------------------------------------------ check


def _python_release_with(limit_below: int, limit_at_least: int) -> tuple[str, str]:
    """A llama-cpp-python release read with a limit below `limit_below` and the first read
    whose limit is at least `limit_at_least`."""
    reads = [(k, v) for k, v in _reads("llama_cpp_python") if v is not None]
    small = [k for k, v in reads if v < limit_below][-1]
    big = next(k for k, v in reads if v >= limit_at_least)
    return small, big


def test_more_experts_than_the_build_allows_fails_and_a_later_release_passes(tmp_path, capsys):
    model = _moe_gguf(tmp_path / "kimi.gguf", 384)
    small, big = _python_release_with(384, 384)
    rc, obj = _check(capsys, model, small, program=_PY_SERVER)
    found = _codes(obj)
    assert rc == 1 and found
    assert found[0]["category"] == "unsupported_arch" and found[0]["severity"] == "error"
    assert "GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS) failed" in found[0]["detail"]
    assert found[0]["remedies"][0]["args"] == {
        "upgrade": {"package": "llama-cpp-python", "specifier": f">={big}"}
    }
    rc, obj = _check(capsys, model, big, program=_PY_SERVER)
    assert not _codes(obj)


def test_exactly_the_limit_is_allowed(tmp_path, capsys):
    # the assert is n_expert <= LLAMA_MAX_EXPERTS: 256 experts load where the limit is 256
    model = _moe_gguf(tmp_path / "dsv3.gguf", 256)
    rc, obj = _check(capsys, model, "0.3.9", program=_PY_SERVER)
    assert not _codes(obj)
    assert not [u for u in obj["unknowns"] if u["fact"] == "llama.cpp expert limit"]


def test_a_build_number_is_judged_by_the_release_trees(tmp_path, capsys):
    reads = [(k, v) for k, v in _reads("llama_cpp") if v is not None]
    small_key, small = next((k, v) for k, v in reads if v < reads[-1][1])
    model = _moe_gguf(tmp_path / "m.gguf", small + 1)
    rc, obj = _check(capsys, model, str(small_key))
    found = _codes(obj)
    assert rc == 1 and found and f"b{small_key}" in found[0]["detail"]
    first = next(k for k, v in reads if v >= small + 1)
    assert found[0]["remedies"][0]["args"]["upgrade"]["specifier"] == f">={first}"
    rc, obj = _check(capsys, model, str(reads[-1][0]))
    assert not _codes(obj)


def test_without_a_build_many_experts_are_a_named_unknown_and_few_are_not(tmp_path, capsys):
    many = _moe_gguf(tmp_path / "many.gguf", 384)
    rc, obj = _check(capsys, many)
    unknown = [u for u in obj["unknowns"] if u["fact"] == "llama.cpp expert limit"]
    assert unknown and "384" in unknown[0]["why"] and not _codes(obj)
    few = _moe_gguf(tmp_path / "few.gguf", 8)  # Mixtral's 8: every build with MoE allows it
    rc, obj = _check(capsys, few)
    assert not [u for u in obj["unknowns"] if u["fact"] == "llama.cpp expert limit"]


def test_a_gguf_refusal_is_reported_before_memory(tmp_path, capsys):
    # llama_model_load reads the hparams (and asserts the expert count) before it allocates the
    # weights or a KV cache: with both wrong, the expert limit is what the launch dies of
    model = _moe_gguf(tmp_path / "big.gguf", 384)
    args = ["check", "--json", "--gpu", "rtx-3090", "--engine-version", "0.3.9", "--",
            *_PY_SERVER, str(model), "--n_ctx", "100000000"]
    rc = main(args)
    obj = json.loads(capsys.readouterr().out)
    codes = [f["code"] for f in obj["findings"] if f["severity"] == "error"]
    assert rc == 1 and codes and codes[0] == "SP-GGUF-004"


def test_gguf_refusals_sort_after_argument_parsing():
    from servepilot.checks.result import engine_stage

    assert engine_stage("SP-ARGS-001") < engine_stage("SP-GGUF-004") < engine_stage("SP-MEM-003")
