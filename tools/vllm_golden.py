#!/usr/bin/env python3
"""Maintainers' tool: record vLLM's own start-up decisions over the golden grid.

The grid (tests/data/vllm_golden/grid.json) is config-only model directories crossed with
GPUs, --dtype, --kv-cache-dtype and --block-size. For each release, the engine itself is
asked (servepilot.engines.vllm.ask: EngineArgs.create_engine_config and the attention
selector in a child process, compute capability faked, no weights, no GPU memory) and its
answers are stored as tests/data/vllm_golden/vllm-RELEASE.jsonl.gz; the test suite checks
the knowledge-based resolver against every stored answer.

  # one venv per release, then:
  python tools/vllm_golden.py run --python /tmp/vllm-0.18/bin/python [--gpu b200] [--offline]
  # answers recorded elsewhere (one JSON object per case, same fields) can be imported:
  python tools/vllm_golden.py import ANSWERS.jsonl --release 0.18.0 --recorded 2026-12-03 \\
      --source "how they were computed"
  python tools/vllm_golden.py models OUTDIR     # write the config-only model directories
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import itertools
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "vllm_golden"
GRID = DATA / "grid.json"
# What one stored answer keeps (the rest of an engine answer is dropped to keep the data small)
KEPT = ("stage", "ok", "backend", "kv_cache_dtype_final", "cache_dtype_after_config",
        "block_size_final", "model_dtype", "use_mla", "use_sparse", "has_sink", "head_size",
        "candidates_valid", "candidates_invalid", "error")


def load_grid(path: Path = GRID) -> dict:
    return json.loads(path.read_text())


def cases(grid: dict) -> list[dict]:
    """Every case of the grid, each with its id `model|gpu|dtype|kv|block`."""
    out = []
    for part in ("grid", "checkpoint_grid"):
        axes = grid[part]
        for gpu, model, dtype, kv, block in itertools.product(
            grid["gpus"], axes["models"], axes["dtype"], axes["kv_cache_dtype"], axes["block_size"]
        ):
            out.append({"id": f"{model}|{gpu['name']}|{dtype}|{kv}|{block}", "model": model,
                        "gpu": gpu["name"], "cc": gpu["cc"], "dtype": dtype,
                        "kv_cache_dtype": kv, "block_size": block})
    return out


def engine_args(case: dict) -> list[str]:
    """The `vllm serve` flags of a case, after the model path."""
    args = []
    if case.get("dtype"):
        args += ["--dtype", case["dtype"]]
    if case.get("kv_cache_dtype"):
        args += ["--kv-cache-dtype", case["kv_cache_dtype"]]
    if case.get("block_size") is not None:
        args += ["--block-size", str(case["block_size"])]
    return args


def write_models(grid: dict, root: Path) -> Path:
    """One directory per model holding only its config.json."""
    for name, config in grid["models"].items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(config, indent=1))
    return root


def answers_path(release: str, variant: str = "") -> Path:
    return DATA / f"vllm-{release}{'-' + variant if variant else ''}.jsonl.gz"


def load_answers(path: Path) -> tuple[dict, dict[str, dict]]:
    """(header, answers by case id) of one stored file."""
    with gzip.open(path, "rt") as f:
        header = json.loads(f.readline())
        rows = [json.loads(line) for line in f if line.strip()]
    return header, {r["id"]: r for r in rows}


def compact(answer: dict) -> dict:
    row = {"id": answer["id"]}
    for key in KEPT:
        if answer.get(key) not in (None, [], {}):
            row[key] = answer[key]
    if "error" in row:
        row["error"] = row["error"][:600]
    return row


def store(header: dict, answers: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same answers give the same bytes
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write((json.dumps(header) + "\n").encode())
        for a in sorted(answers, key=lambda r: r["id"]):
            gz.write((json.dumps(compact(a), sort_keys=True) + "\n").encode())
    return path


def cmd_import(ns) -> int:
    rows = [json.loads(line) for line in open(ns.answers) if line.strip()]
    rows = [r.get("vllm", r) for r in rows]  # rows {id, agree, vllm, servepilot} carry vLLM's under "vllm"
    known = {c["id"] for c in cases(load_grid())}
    unknown = [r["id"] for r in rows if r["id"] not in known]
    if unknown:
        print(f"{ns.answers}: {len(unknown)} case ids are not in {GRID.name}, e.g. {unknown[0]}", file=sys.stderr)
        return 2
    header = {"engine": "vllm", "release": ns.release, "recorded": ns.recorded, "source": ns.source,
              "nvidia_artifactory": not ns.offline, "gpus": sorted({r["id"].split("|")[1] for r in rows}),
              "cases": len(rows)}
    print(store(header, rows, answers_path(ns.release, ns.variant)))
    return 0


def cmd_run(ns) -> int:
    """Ask the engine of `--python` for every case of the grid, one child per GPU."""
    import tempfile

    sys.path.insert(0, str(REPO / "src"))
    from servepilot.engines.vllm import ask

    grid = load_grid()
    todo = [c for c in cases(grid) if not ns.gpu or c["gpu"] in ns.gpu]
    answers: list[dict] = []
    release = None
    with tempfile.TemporaryDirectory(prefix="vllm-golden-") as tmp:
        models = write_models(grid, Path(tmp) / "models")
        for gpu in grid["gpus"]:
            batch = [c for c in todo if c["gpu"] == gpu["name"]]
            if not batch:
                continue
            questions = [{"id": c["id"], "model": str(models / c["model"]), "args": engine_args(c)} for c in batch]
            reply = ask.ask_engine(questions, python=ns.python, cc=gpu["cc"], gpu_count=1,
                                   artifactory=not ns.offline, timeout_s=ns.timeout)
            if reply.error:
                print(f"{gpu['name']}: {reply.error}", file=sys.stderr)
                return 1
            release = release or reply.engine_version
            answers += reply.answers
            print(f"{gpu['name']}: {len(reply.answers)} answers in {reply.wall_s:.0f} s", file=sys.stderr)
    header = {"engine": "vllm", "release": release, "recorded": datetime.date.today().isoformat(),
              "source": "tools/vllm_golden.py run (servepilot.engines.vllm.ask)",
              "nvidia_artifactory": not ns.offline, "gpus": sorted({c["gpu"] for c in todo}),
              "cases": len(answers)}
    print(store(header, answers, answers_path(release, ns.variant)))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("models", help="write the config-only model directories")
    m.add_argument("outdir")
    i = sub.add_parser("import", help="store answers recorded elsewhere")
    i.add_argument("answers")
    i.add_argument("--release", required=True)
    i.add_argument("--recorded", required=True, help="date the answers were computed (YYYY-MM-DD)")
    i.add_argument("--source", required=True)
    i.add_argument("--variant", default="", help="file name suffix, e.g. b200-offline-artifactory")
    i.add_argument("--offline", action="store_true", help="NVIDIA's cubin artifactory was unreachable")
    r = sub.add_parser("run", help="ask an installed vLLM for every case")
    r.add_argument("--python", required=True, help="the python of a venv holding vllm")
    r.add_argument("--gpu", action="append", help="only these grid GPUs (repeatable)")
    r.add_argument("--offline", action="store_true", help="answer as a host without NVIDIA's cubin artifactory")
    r.add_argument("--variant", default="")
    r.add_argument("--timeout", type=float, default=1800.0, help="seconds per GPU batch")
    ns = ap.parse_args(argv)
    if ns.cmd == "models":
        print(write_models(load_grid(), Path(ns.outdir)))
        return 0
    return cmd_import(ns) if ns.cmd == "import" else cmd_run(ns)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
