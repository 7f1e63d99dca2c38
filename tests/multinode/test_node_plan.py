"""`plan` on a command set: each node's pipeline stage, its layers, and the planner's figures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from servepilot.cli.main import main

safetensors_numpy = pytest.importorskip("safetensors.numpy")


@pytest.fixture
def tiny(tmp_path):
    root = tmp_path / "tiny-llama"
    root.mkdir()
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "intermediate_size": 512, "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 6,
           "vocab_size": 1024, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    (root / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    tensors = {f"model.layers.{i}.mlp.up_proj.weight": np.zeros((512, 256), dtype=np.float16) for i in range(6)}
    safetensors_numpy.save_file(tensors, str(root / "model.safetensors"))
    files = []
    for k in range(2):
        script = tmp_path / f"node{k}.sh"
        script.write_text(f"vllm serve {root} -tp 8 -pp 2 --nnodes 2 --node-rank {k} --master-addr 10.0.0.1"
                          f"{' --headless' if k else ''}\n", encoding="utf-8")
        files += ["--command-file", str(script)]
    return files


def test_plan_per_node_splits_layers_by_stage(tiny, capsys):
    assert main(["plan", "--gpu", "h200x8", "--engine-version", "0.13.0", *tiny, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    memory = out["multinode"]["memory"]
    assert [(m["node"], m["pp_stages"], m["layers"], m["ranks"]) for m in memory] == [
        ("node0", [0], [[0, 2]], 8), ("node1", [1], [[3, 5]], 8)]
    # the per-node figures are the planner's own rows for that node's ranks
    rows = out["rows"]
    assert memory[1]["weights_per_gpu_bytes"] == max(r["weights_bytes"] for r in rows if r["pp_rank"] == 1)
    assert out["multinode"]["world_size"] == 16 and out["tp"] == 8 and out["pp"] == 2
