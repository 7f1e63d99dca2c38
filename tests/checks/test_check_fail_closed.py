"""Issue 12: no PASS on what check cannot back. Each input here once gave PASS, exit 0."""

from __future__ import annotations

import json
import os
import struct
import time

import pytest

from servepilot.cli.main import main

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def _check(path, *extra) -> list[str]:
    return [
        "check",
        "--json",
        "--gpu",
        "h100x1",
        "--engine-version",
        "0.18.0",
        *extra,
        "--",
        "vllm",
        "serve",
        str(path),
    ]


def _model(tmp_path, config: dict, name="m"):
    root = tmp_path / name
    root.mkdir()
    (root / "config.json").write_text(json.dumps(config))
    return root


def _shard(tensors: dict) -> bytes:
    header = json.dumps(tensors).encode()
    end = max((v["data_offsets"][1] for v in tensors.values()), default=0)
    return struct.pack("<Q", len(header)) + header + b"\0" * end


GOOD = {"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}}


def test_a_whole_checkpoint_passes(tmp_path, capsys):
    # the guard of the tests below: the same model without damage is not refused
    root = _model(tmp_path, LLAMA)
    (root / "model.safetensors").write_bytes(_shard(GOOD))
    assert main(_check(root)) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] in ("pass", "warn")


def test_config_without_model_type_or_architectures_is_unknown_exit_4(tmp_path, capsys):
    cfg = {k: v for k, v in LLAMA.items() if k not in ("model_type", "architectures")}
    root = _model(tmp_path, cfg)
    assert main(_check(root)) == 4
    obj = json.loads(capsys.readouterr().out)
    assert obj["verdict"] == "unknown"
    facts = [u["fact"] for u in obj["unknowns"]]
    assert "architecture" in facts and all(u["settle"] for u in obj["unknowns"])


def test_config_without_geometry_is_unknown(tmp_path, capsys):
    root = _model(
        tmp_path, {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}
    )
    assert main(_check(root)) == 4
    facts = [u["fact"] for u in json.loads(capsys.readouterr().out)["unknowns"]]
    assert "model geometry" in facts and "memory" in facts


def test_text_output_names_each_unknown(tmp_path, capsys):
    root = _model(tmp_path, {"hidden_size": 64})
    assert main(_check(root)[:1] + _check(root)[2:]) == 4
    out = capsys.readouterr().out
    assert (
        out.startswith("verdict: UNKNOWN") and "[unknown] architecture" in out and "settle:" in out
    )


@pytest.mark.parametrize(
    "key,value",
    [
        ("num_hidden_layers", "sixty"),
        ("num_hidden_layers", -5),
        ("num_attention_heads", 0),
        ("hidden_size", float("nan")),
        ("num_hidden_layers", 1_000_000),
        ("num_local_experts", 10**8),
    ],
)
def test_absurd_geometry_is_bad_input_fast(tmp_path, capsys, key, value):
    root = _model(tmp_path, dict(LLAMA, **{key: value}))
    start = time.perf_counter()
    for verb in ("check", "plan", "inspect"):
        argv = (
            [verb, str(root)]
            if verb == "inspect"
            else [verb, "--gpu", "h100x1", "--", "vllm", "serve", str(root)]
        )
        assert main(argv) == 2, verb
        err = capsys.readouterr().err
        assert "config.json" in err and key in err and "Traceback" not in err
    # three verbs on a million-layer config: well under a second each, not minutes
    assert time.perf_counter() - start < 10


def _damaged(tmp_path, kind: str):
    root = _model(tmp_path, LLAMA)
    (root / "model-00001-of-00002.safetensors").write_bytes(_shard(GOOD))
    bad = root / "model-00002-of-00002.safetensors"
    if kind == "dangling symlink":
        os.symlink(tmp_path / "gone.safetensors", bad)
    elif kind == "symlink loop":
        os.symlink(root / "loop.safetensors", bad)
        os.symlink(bad, root / "loop.safetensors")
    elif kind == "header past EOF":
        bad.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    elif kind == "overlapping offsets":
        header = {
            "a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]},
            "b": {"dtype": "F16", "shape": [4], "data_offsets": [4, 12]},
        }
        bad.write_bytes(_shard(header))
    return root


@pytest.mark.parametrize(
    "kind", ["dangling symlink", "symlink loop", "header past EOF", "overlapping offsets"]
)
def test_a_broken_shard_is_an_error_finding(tmp_path, capsys, kind):
    root = _damaged(tmp_path, kind)
    assert main(_check(root)) == 1
    obj = json.loads(capsys.readouterr().out)
    assert obj["verdict"] == "fail"
    codes = [f["code"] for f in obj["findings"] if f["severity"] == "error"]
    assert "SP-CKPT-001" in codes


# Hunyuan-A13B publishes moe_intermediate_size and moe_topk as per-layer lists (its
# config.json in Tencent-Hunyuan/Hunyuan-A13B): a real shape, not bad input.
HUNYUAN_LIKE = {
    **LLAMA,
    "architectures": ["HunYuanMoEV1ForCausalLM"],
    "model_type": "hunyuan_v1_moe",
    "num_experts": 8,
    "moe_intermediate_size": [128, 128],
    "moe_topk": [2, 2],
}


def test_per_layer_lists_are_read_not_refused(tmp_path, capsys):
    root = _model(tmp_path, HUNYUAN_LIKE)
    assert main(["inspect", "--json", str(root)]) == 0
    notes = json.dumps(json.loads(capsys.readouterr().out))
    assert "per-layer list" in notes


def test_per_layer_lists_leave_an_estimated_count_unknown(tmp_path, capsys):
    root = _model(tmp_path, HUNYUAN_LIKE)
    assert main(_check(root)) == 4
    unknowns = json.loads(capsys.readouterr().out)["unknowns"]
    assert any(u["fact"] == "model geometry" and "per-layer list" in u["why"] for u in unknowns)


def test_per_layer_lists_with_exact_shard_sizes_are_not_unknown(tmp_path, capsys):
    # the headers give the weights, so the unread list changes no figure a rule compares
    root = _model(tmp_path, HUNYUAN_LIKE)
    (root / "model.safetensors").write_bytes(_shard(GOOD))
    main(_check(root))
    unknowns = json.loads(capsys.readouterr().out).get("unknowns", [])
    assert not any("per-layer list" in u["why"] for u in unknowns)


def test_a_bad_entry_in_a_per_layer_list_is_bad_input(tmp_path, capsys):
    root = _model(tmp_path, {**HUNYUAN_LIKE, "moe_intermediate_size": [128, "wide"]})
    assert main(["inspect", str(root)]) == 2
    assert "moe_intermediate_size[1]" in capsys.readouterr().err
