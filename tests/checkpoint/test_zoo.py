"""The model zoo (bench/zoo: real config.json files with their published parameter counts).

inspect, check and plan must give the same parameters, layer kinds and quantization for every
model; the layer reader must count each family's parameters near the published figure."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from servepilot.cli.main import main

ZOO = Path(__file__).resolve().parents[2] / "bench" / "zoo"
MODELS = sorted(p for p in ZOO.iterdir() if (p / "config.json").is_file())


def _json(argv: list[str]) -> tuple[int, dict]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    return rc, json.loads(buf.getvalue())


def test_the_zoo_is_real_and_sourced():
    assert len(MODELS) >= 70
    for root in MODELS:
        source = json.loads((root / "source.json").read_text())
        org, name = root.name.split("--", 1)
        assert source["source_url"] == f"https://huggingface.co/{org}/{name}/blob/main/config.json"
        assert (
            source["copied_from"]
            and source["published"]["source"]
            and source["published"]["total_b"] > 0
        )
        for f in source["files"]:
            assert (root / f).is_file()


@pytest.mark.parametrize("root", MODELS, ids=[p.name for p in MODELS])
def test_inspect_check_and_plan_agree(root):
    rc, inspected = _json(["inspect", "--json", str(root)])
    assert rc == 0
    want = inspected["model_summary"]
    serve = [
        "--gpu",
        "h200x8",
        "--engine-version",
        "0.18.0",
        "--",
        "vllm",
        "serve",
        str(root),
        "-tp",
        "8",
        "--trust-remote-code",
    ]
    _, checked = _json(["check", "--json", *serve])
    _, planned = _json(["plan", "--json", *serve])
    for got in (checked["model_summary"], planned["model_summary"]):
        assert (got["parameters"], got["layer_kinds"], got["quantization"]) == (
            want["parameters"],
            want["layer_kinds"],
            want["quantization"],
        )
    # a model counted far from its published size never passes silently
    published = json.loads((root / "source.json").read_text())["published"]["total_b"] * 1e9
    if want["parameters"] is None or abs(want["parameters"] - published) / published > 0.10:
        assert checked["verdict"] in ("unknown", "fail") and (
            checked["unknowns"] or checked["findings"]
        )


@pytest.mark.parametrize(
    "name,kinds",
    [
        ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", {"full": 6, "mamba": 23, "none+moe": 23}),
        ("nvidia--Llama-3_3-Nemotron-Super-49B-v1", {"full": 49, "none": 31}),
        ("openai--gpt-oss-120b", {"full+moe": 18, "sliding+moe": 18}),
        ("google--gemma-3-1b-it", {"full": 4, "sliding": 22}),
        ("deepseek-ai--DeepSeek-V3", {"full": 3, "full+moe": 58}),
    ],
)
def test_layer_kinds_of_hybrid_and_nas_models(name, kinds):
    _, inspected = _json(["inspect", "--json", str(ZOO / name)])
    assert inspected["model_summary"]["layer_kinds"] == kinds


def test_most_of_the_zoo_is_within_3_percent_of_the_published_count():
    from servepilot.checkpoint.estimate import estimate_params
    from servepilot.checkpoint.inspect import inspect_path

    close = 0
    for root in MODELS:
        est = estimate_params(inspect_path(root))
        published = json.loads((root / "source.json").read_text())["published"]["total_b"] * 1e9
        close += est is not None and abs(est.total - published) / published <= 0.03
    assert close / len(MODELS) >= 0.95
