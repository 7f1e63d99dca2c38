"""servepilot's SGLang resolver against SGLang's own answers.

tests/engines/sglang_golden/*.json were produced by tools/sglang_golden.py, which runs each
release's real ServerArgs and ModelRunner backend selection on CPU with the GPU faked (the
files say when and how). Every stored case must agree: the backend or the refusal (with the
engine's own text), the page size, and the memory defaults. Cases listed under
known_differences in knowledge/attention.yaml are checked for the documented difference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepilot.checkpoint.inspect import inspect_path
from servepilot.deployment import Deployment
from servepilot.engines import knowledge as kb
from servepilot.engines.command import EngineLaunch, ShellContext
from servepilot.engines.sglang import memory
from servepilot.engines.sglang.resolve import resolve
from servepilot.hardware.cluster import Cluster, Gpu

GOLDEN = Path(__file__).parent / "sglang_golden"
FILES = sorted(GOLDEN.glob("sglang-*.json"))


def _known_differences() -> list[dict]:
    return kb.load_file("sglang", "attention").get("known_differences") or []


def _difference_for(release: str, case: dict) -> dict | None:
    for diff in _known_differences():
        if not kb.version_in(release, diff["versions"]):
            continue
        when = diff["when"]
        if all(case.get(k) in (v if isinstance(v, list) else [v]) for k, v in when.items()):
            return diff
    return None


def _deployment(spec, gpu: dict, case: dict, release: str) -> Deployment:
    opts = {"tp_size": case["tp"], "kv_cache_dtype": case["kv_cache_dtype"]}
    if case["attention_backend"]:
        opts["attention_backend"] = case["attention_backend"]
    launch = EngineLaunch(engine="sglang", argv=("python", "-m", "sglang.launch_server"),
                          program="python -m sglang.launch_server", model=spec.path, options=opts,
                          explicit=frozenset(opts), shell=ShellContext(env={}), engine_version=release)
    cc = tuple(gpu["cc"])
    gpus = tuple(Gpu(index=i, name=case["gpu"], key=case["gpu"], memory_bytes=gpu["mem_mib"] << 20,
                     compute_capability=cc) for i in range(case["tp"]))
    return Deployment(launch=launch, cluster=Cluster(gpus=gpus, source="flag"), spec=spec)


def _compare(data: dict, specs: dict) -> tuple[int, list[str]]:
    release = data["release"]
    wrong = []
    for case in data["cases"]:
        spec = specs[case["model"]]
        gpu = data["gpus"][case["gpu"]]
        res = resolve(_deployment(spec, gpu, case, release))
        label = (f"{release} {case['gpu']} {case['model']} backend={case['attention_backend']} "
                 f"kv={case['kv_cache_dtype']} tp={case['tp']}")
        diff = _difference_for(release, case)
        if not case["ok"]:
            if not res.fails:
                wrong.append(f"{label}: SGLang refuses ({case['error']}), servepilot picks {res.attention_backend}")
            elif diff is not None:
                if diff["servepilot_error_starts"] not in res.selection_error:
                    wrong.append(f"{label}: documented difference not reproduced: {res.selection_error}")
            elif res.selection_error != case["error"]:
                wrong.append(f"{label}: error text {res.selection_error!r} != SGLang's {case['error']!r}")
            continue
        if res.fails:
            wrong.append(f"{label}: servepilot refuses ({res.selection_error}), SGLang runs "
                         f"{case['attention_backend']}")
            continue
        got = (res.attention_backend, res.block_size)
        want = (case["model_runner_backend"] if case.get("model_runner_backend") else case["attention_backend"],
                case["page_size"])
        if got != want:
            wrong.append(f"{label}: backend/page {got} != SGLang's {want}")
        mem = memory.defaults(release, gpu["mem_mib"], tp=case["tp"], use_mla=spec.is_mla,
                              arch=spec.config["architectures"][0])
        got_mem = (mem.chunked_prefill_size, mem.cuda_graph_max_bs)
        want_mem = (case["chunked_prefill_size"], case["cuda_graph_max_bs"])
        if got_mem != want_mem or abs(mem.mem_fraction_static - case["mem_fraction_static"]) > 1e-9:
            wrong.append(f"{label}: memory ({mem.mem_fraction_static}, {got_mem}) != SGLang's "
                         f"({case['mem_fraction_static']}, {want_mem})")
    return len(data["cases"]), wrong


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_resolver_agrees_with_sglang(path, tmp_path):
    data = json.loads(path.read_text())
    assert data["cases"], "an answer file without cases tests nothing"
    specs = {}
    for name, config in data["models"].items():
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        specs[name] = inspect_path(d)
    total, wrong = _compare(data, specs)
    assert not wrong, f"{len(wrong)} of {total} cases differ from SGLang {data['release']}:\n" + "\n".join(wrong[:40])


def test_answer_files_cover_three_releases():
    releases = {json.loads(p.read_text())["release"] for p in FILES}
    assert len(releases) >= 3, releases


def test_the_two_issue_examples_are_refusals_with_the_engines_text(tmp_path):
    """trtllm_mla on an RTX PRO 6000 (SM120) with 0.5.2, trtllm_mha on an RTX 5090 with 0.5.10."""
    data = json.loads((GOLDEN / "sglang-0.5.2.json").read_text())
    d = tmp_path / "ds"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(data["models"]["deepseek_v3"]))
    case = {"gpu": "rtx-pro-6000", "tp": 1, "kv_cache_dtype": "auto", "attention_backend": "trtllm_mla"}
    res = resolve(_deployment(inspect_path(d), {"cc": [12, 0], "mem_mib": 97887}, case, "0.5.2"))
    assert res.selection_error == ("TRTLLM MLA backend is only supported on Blackwell GPUs (SM100). "
                                   "Please use a different backend.")
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(data["models"]["llama"]))
    case = {"gpu": "rtx-5090", "tp": 1, "kv_cache_dtype": "auto", "attention_backend": "trtllm_mha"}
    res = resolve(_deployment(inspect_path(tmp_path / "llama"), {"cc": [12, 0], "mem_mib": 32607}, case,
                              "0.5.10.post1"))
    assert res.selection_error.startswith("TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100)")
    assert res.extra["attention_category"] == "attention_backend"
