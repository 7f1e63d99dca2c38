"""Measure `check --ask-engine`: its wall time, and that `check` without it costs nothing more.

Runs the real CLI (`servepilot check ...`, each a fresh process, as an
operator would) on config-only model directories from the golden grid:

  plain       check --json (no flag), N times: the baseline
  ask         check --json --ask-engine --engine-python PY, N times: the engine's answer included
  imports     whether `check` without the flag imported servepilot.engines.vllm.ask (it must not)

Prints median and max seconds per case, and the engine's own time split (its python's import
of torch + vLLM, then the questions). Target: ask < 60 s on 2 cores; plain unchanged.

    python bench/bench_ask_engine.py --engine-python /tmp/vllm-0.18/bin/python [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("vllm_golden_tool", REPO / "tools" / "vllm_golden.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

CASES = [("llama-h128", "h100", ["--kv-cache-dtype", "fp8"]),
         ("gptoss-sinks", "b200", []),
         ("dsv32-sparse-mla", "h100x8", ["--kv-cache-dtype", "fp8_e4m3", "-tp", "8"])]


ENTRY = "import sys; from servepilot.cli.main import main; sys.exit(main(sys.argv[1:]))"


def run(argv: list[str]) -> tuple[float, dict]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", ENTRY, *argv], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    took = time.monotonic() - started
    try:
        return took, json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"check did not print JSON (exit {proc.returncode}): {proc.stderr[-400:]}") from None


def plain_imports_ask() -> bool:
    code = ("import sys; from servepilot.cli.main import main; "
            "import contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(sys.argv[1:])\n"
            "    except SystemExit: pass\n"
            "print('servepilot.engines.vllm.ask' in sys.modules)")
    with tempfile.TemporaryDirectory() as tmp:
        root = tool.write_models(tool.load_grid(), Path(tmp))
        out = subprocess.run([sys.executable, "-c", code, "check", "--gpu", "h100", "--engine-version", "0.18.0",
                              "--", "vllm", "serve", str(root / "llama-h128")], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    return out.stdout.strip().endswith("True")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine-python", required=True, help="the python of a venv holding vllm")
    ap.add_argument("--engine-version", default=None, help="for the knowledge side (default: the engine's)")
    ap.add_argument("--repeat", type=int, default=2)
    ns = ap.parse_args()
    print(f"cores: {os.cpu_count()}  load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    plain_times, ask_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = tool.write_models(tool.load_grid(), Path(tmp))
        for model, gpu, flags in CASES:
            for _ in range(ns.repeat):
                version = ["--engine-version", ns.engine_version or "0.18.0"]
                command = ["--", "vllm", "serve", str(root / model), *flags]
                took, _ = run(["check", "--json", "--gpu", gpu, *version, *command])
                plain_times.append(took)
                took, data = run(["check", "--json", "--ask-engine", "--engine-python", ns.engine_python,
                                  "--gpu", gpu, *version, *command])
                ask_times.append(took)
                answer = data.get("engine_answer") or {}
                said = answer.get("backend") or f"refused at {answer.get('stage')}" if answer.get("asked") \
                    else f"not asked: {answer.get('note')}"
                print(f"{model:18} {gpu:5} {' '.join(flags):28} ask {took:6.1f} s  engine "
                      f"{answer.get('engine_version')}: {said}  (child {answer.get('wall_s')} s)  "
                      f"knowledge {data['resolved'].get('attention_backend')}  verdict {data['verdict']}")
    print(f"check (plain):        median {statistics.median(plain_times):5.2f} s  max {max(plain_times):5.2f} s  "
          f"({len(plain_times)} runs)")
    print(f"check --ask-engine:   median {statistics.median(ask_times):5.2f} s  max {max(ask_times):5.2f} s  "
          f"({len(ask_times)} runs; target < 60 s)")
    print(f"plain check imports the asking module: {plain_imports_ask()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
