"""`servepilot plan`: JSON contract, text rendering, exit codes (the deployment is built here)."""

from __future__ import annotations

import json

import pytest
from planning_builders import MiB, deployment, gpus, llama_70b, no_resolver, qwen2_7b  # noqa: F401

import servepilot.cli.plan_cmd as plan_cmd
from servepilot.cli.main import main
from servepilot.hardware.cluster import Gpu


@pytest.fixture
def serve(monkeypatch):
    """Make `plan` see the deployment a test chooses, whatever command it is given."""
    chosen = {}

    def fake(command, gpu, engine_version, command_file):
        chosen["command"] = list(command)
        return chosen["dep"]

    monkeypatch.setattr(plan_cmd, "build_deployment_from_cli", fake)

    def use(dep):
        chosen["dep"] = dep
        return chosen

    return use


def test_json_schema_first_and_rows_per_gpu(serve, capsys):
    seen = serve(deployment(qwen2_7b(), {"tensor_parallel_size": 2}, n_gpus=2))
    rc = main(["plan", "--json", "--tp", "1", "--", "vllm", "serve", "/models/qwen2-7b", "-tp", "2"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert list(out)[0] == "schema" and out["schema"] == "servepilot.plan/1"
    assert seen["command"] == ["vllm", "serve", "/models/qwen2-7b", "-tp", "2"]
    assert len(out["rows"]) == 2 and out["ok"] is True
    assert {a["tp"] for a in out["alternatives"]} == {1, 2}
    assert out["summary"]["kv_tokens"] == out["kv_tokens"] > 0
    assert {t["name"] for t in out["terms"]} >= {"weights", "activation_peak", "kv_budget"}


def test_text_has_a_bar_per_gpu_and_exit_1_when_it_does_not_fit(serve, capsys):
    serve(deployment(llama_70b(), {"tensor_parallel_size": 1}, n_gpus=1, gpu=gpus(1, mib=81920, name="NVIDIA A100 "
                                                                                                     "80GB")))
    rc = main(["plan", "--", "vllm", "serve", "/models/llama-70b"])
    text = capsys.readouterr().out
    assert rc == 1
    assert "Per GPU" in text and "does not fit" in text
    assert "█" in text  # the weights part of the bar


def test_bad_tp_is_a_usage_error(serve, capsys):
    serve(deployment(qwen2_7b(), {}))
    assert main(["plan", "--tp", "4,x", "--", "vllm", "serve", "m"]) == 2


def test_bar_parts_add_up_to_the_width():
    from servepilot.planning.plan import GpuRow

    row = GpuRow(0, "g", 0, 0, 0, total_bytes=100, weights_bytes=50, runtime_bytes=1, kv_bytes=30, free_bytes=19)
    segments = plan_cmd.bar(row, width=40)
    assert sum(len(text) for text, _ in segments) == 40
    assert len(segments) == 4  # a 1 % runtime still gets one cell


@pytest.mark.parametrize(("version", "rc", "verdict"), [
    ("0.13.0", 1, "loading needs more memory than the GPU has"),  # 16-bit + FP8 copies > 140 GiB
    ("0.19.0", 0, "verdict: fits"),                               # one layer at a time
])
def test_online_fp8_shows_the_weights_while_loading(serve, capsys, version, rc, verdict):
    serve(deployment(llama_70b(), {"quantization": "fp8", "max_model_len": 4096}, n_gpus=1,
                     version=version))
    assert main(["plan", "--", "vllm", "serve", "/models/llama-70b", "--quantization", "fp8"]) == rc
    out = " ".join(capsys.readouterr().out.split())
    assert "weights while loading:" in out and verdict in out
    serve(deployment(llama_70b(), {"max_model_len": 4096}, n_gpus=1, version=version))
    main(["plan", "--", "vllm", "serve", "/models/llama-70b"])
    assert "weights while loading" not in capsys.readouterr().out


def test_a_box_of_different_gpus_is_headed_with_each_kind_and_its_count(serve, capsys):
    box = gpus(2, name="NVIDIA A100 80GB", key="a100-80gb", mib=81920, cc=(8, 0)) + tuple(
        Gpu(2 + i, "NVIDIA A100 40GB", "a100-40gb", 40960 * MiB, (8, 0)) for i in range(2)
    )
    serve(deployment(qwen2_7b(), {"tensor_parallel_size": 4}, gpu=box))
    main(["plan", "--", "vllm", "serve", "/models/qwen2-7b", "-tp", "4"])
    header = capsys.readouterr().out.splitlines()[0]
    assert "2 × NVIDIA A100 80GB" in header and "2 × NVIDIA A100 40GB" in header
