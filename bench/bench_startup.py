"""Benchmark servepilot's start-up: `--version`, `check` on the README command, and `inspect`.

Prints figures; it is not a test. Run: `python bench/bench_startup.py [--repeat N]`.

Figures reported (targets from issue 11), each the median of N fresh processes:
  --version     `servepilot --version`
  check         `servepilot check` on the README's command (kimi-k2.5-nvfp4 example, TP 8,
                RTX PRO 6000 x8, vLLM 0.16.0); the ratio check / --version should be <= 3
  inspect       `servepilot inspect` of the 1 T-parameter skeleton of bench_inspect.py, against
                the header-read floor (read + json.loads of its 119 headers); ratio <= 2
The first check run fills the compiled-data cache (datafile.py); it is reported apart.
The package's bytecode is compiled first, as `pip install` of the wheel does: with
PYTHONDONTWRITEBYTECODE set (as in some CI and dev shells) an editable checkout would
otherwise compile ~80 modules from source on every run (~0.2 s of CPU), which no installed
copy does.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_inspect import CPU_SECONDS, floor_read_and_parse, write_skeleton  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
README_CHECK = ["check", "--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0", "--",
                "vllm", "serve", str(ROOT / "examples" / "kimi-k2.5-nvfp4"),
                "--tensor-parallel-size", "8", "--trust-remote-code", "--kv-cache-dtype", "auto"]


CPU: dict[str, list[float]] = {}  # CPU seconds per command: steadier than wall time under load


def run_cli(args: list[str], env: dict, ok=(0, 1)) -> float:
    """Wall time of one `servepilot ARGS` process, run as the console script runs it; its CPU
    time (user + system, with any child it forked) goes to CPU[first word]."""
    exe = [sys.executable, "-c", "from servepilot.cli.main import run; run()"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(exe + args, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU.setdefault(args[0], []).append(cpu)
    if out.returncode not in ok:
        raise SystemExit(f"servepilot {' '.join(args[:3])} failed ({out.returncode}): {out.stderr.strip()}")
    return dt


def median_of(n: int, fn) -> float:
    return statistics.median(fn() for _ in range(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs per figure; the median is shown")
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}")
    import servepilot

    compileall.compile_dir(Path(servepilot.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SERVEPILOT_HOME=str(Path(tmp) / "home"))
        env.pop("SERVEPILOT_CACHE", None)
        first = run_cli(README_CHECK, env)  # fills the compiled-data cache
        CPU.clear()
        version = median_of(args.repeat, lambda: run_cli(["--version"], env))
        check = median_of(args.repeat, lambda: run_cli(README_CHECK, env))
        print(f"--version          {version * 1000:7.0f} ms")
        print(f"check (README)     {check * 1000:7.0f} ms   (first run, cache cold: {first * 1000:.0f} ms)")
        print(f"check / --version  {check / version:7.2f} x   (target <= 3)")
        cpu_v, cpu_c = statistics.median(CPU["--version"]), statistics.median(CPU["check"])
        print(f"CPU: --version {cpu_v * 1000:.0f} ms, check {cpu_c * 1000:.0f} ms, ratio {cpu_c / cpu_v:.2f} x")

        skel = Path(tmp) / "skeleton"
        skel.mkdir()
        write_skeleton(skel)
        run_cli(["inspect", str(skel), "--json"], env)  # warm the page cache
        floor = median_of(args.repeat, lambda: floor_read_and_parse(skel))
        inspect = median_of(args.repeat, lambda: run_cli(["inspect", str(skel), "--json"], env))
        print(f"header-read floor  {floor * 1000:7.0f} ms")
        print(f"inspect (1 T)      {inspect * 1000:7.0f} ms")
        print(f"inspect / floor    {inspect / floor:7.2f} x   (target <= 2)")
        cpu_f, cpu_i = CPU_SECONDS["floor"], statistics.median(CPU["inspect"][1:])
        print(f"CPU: floor {cpu_f * 1000:.0f} ms (best), inspect {cpu_i * 1000:.0f} ms "
              f"(its forked child included), ratio {cpu_i / cpu_f:.2f} x")


if __name__ == "__main__":
    main()
