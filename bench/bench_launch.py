"""Benchmark the launch supervisor. Prints figures; it is not a test.

Run: `python bench/bench_launch.py [--seconds 5] [--rate 10000] [--repeats 5]`.

Figures reported (targets from issue 7):
  follow   the supervisor's CPU time / wall time while the engine's log grows at RATE
           lines a second (a writer subprocess started through servepilot's own
           start_run, so the real Supervisor loop follows the real run log: tail, phase
           rules, liveness, port checks). Target < 5% of one core.
  diagnose time from the engine's exit (stamped by the engine itself just before it
           exits) to the diagnosis line printed by `servepilot launch` in a fresh CLI
           process. Target < 1 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# A vLLM-looking worker line (~130 bytes, the length of a typical INFO line with a prefix).
WRITER = textwrap.dedent(
    """
    import sys, time
    rate, seconds = int(sys.argv[1]), float(sys.argv[2])
    line = (
        "(Worker_TP{w} pid=4242) INFO 02-10 12:00:{s:02d} [gpu_model_runner.py:2602] "
        "step {n}: nothing to see here, just steady log traffic\\n"
    )
    tick = 0.01  # write in 10 ms batches: 100 lines per batch at 10,000 lines/s
    per_tick = max(1, int(rate * tick))
    start = time.monotonic(); n = 0
    out = sys.stdout
    while time.monotonic() - start < seconds:
        out.write("".join(line.format(w=i % 8, s=(n // rate) % 60, n=n + i) for i in range(per_tick)))
        n += per_tick
        if n % (rate // 2) < per_tick:  # a real phase line twice a second
            out.write("(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1] GPU KV cache size: 1,234,560 tokens\\n")
        out.flush()
        next_t = start + (n // per_tick) * tick
        delay = next_t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    sys.stderr.write(f"wrote {n} lines in {time.monotonic() - start:.2f} s\\n")
    """
)

# A failing engine: a realistic start (one second of loading; real engines take seconds to
# minutes, a missing model file about half a second), a worker traceback, then it stamps
# its exit time.
FAILER = textwrap.dedent(
    """
    import sys, time
    stamp = sys.argv[1]
    time.sleep(1.0)
    for i in range(2000):
        print(f"(Worker_TP{i % 8} pid=77) INFO 02-10 12:00:00 [loader.py:1] loading layer {i}", flush=False)
    print("(Worker_TP4 pid=77) ERROR 02-10 12:00:01 [multiproc_executor.py:751] Traceback (most recent call last):")
    print('(Worker_TP4 pid=77) ERROR 02-10 12:00:01 [multiproc_executor.py:751]   File "x.py", line 1, in <module>')
    print("(Worker_TP4 pid=77) ERROR 02-10 12:00:01 [multiproc_executor.py:751] "
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
          "GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free.")
    sys.stdout.flush()
    with open(stamp, "w") as f:
        f.write(repr(time.time()))
    sys.exit(1)
    """
)


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def bench_follow(seconds: float, rate: int) -> None:
    os.environ["SERVEPILOT_HOME"] = tempfile.mkdtemp(prefix="sp-bench-home-")
    from servepilot.runs import integration, launch

    script = Path(tempfile.mkdtemp(prefix="sp-bench-")) / "writer.py"
    script.write_text(WRITER)
    marks: dict[str, float] = {}
    real_triage = integration.triage_log

    def timed_triage(path, engine):
        # The follow phase ends where the diagnosis begins; only the follow is measured here.
        marks["cpu"], marks["wall"] = cpu_seconds(), time.monotonic()
        return real_triage(path, engine)

    integration.triage_log = timed_triage
    # The supervisor parses triage's signature table once, in a background thread, as the
    # engine starts (~0.1 s of CPU); do it first so the figure is the steady following cost.
    integration.warm_triage()
    try:
        plan = launch.prepare_launch([sys.executable, str(script), str(rate), str(seconds), "--port", "1"], force=True)
        run = launch.start_run(plan)
        sup = launch.Supervisor(run, ready_timeout_s=seconds + 30)
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        outcome = sup.wait_ready()
    finally:
        integration.triage_log = real_triage
    cpu = marks["cpu"] - cpu0
    wall = marks["wall"] - wall0
    lines = sup.tracker.lines_seen
    size = run.log_path.stat().st_size
    print(f"follow:   {lines:,} lines ({size / 1e6:.1f} MB) in {wall:.2f} s = {lines / wall:,.0f} lines/s; "
          f"supervisor CPU {cpu:.3f} s = {100 * cpu / wall:.2f}% of one core (target < 5%)")
    print(f"          outcome {outcome.state} ({outcome.reason}); phase rules matched: "
          f"kv_tokens={outcome.figures.get('kv_tokens')}")


def bench_diagnose(repeats: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sp-bench-"))
    script = tmp / "failer.py"
    script.write_text(FAILER)
    env = dict(os.environ, SERVEPILOT_HOME=str(tmp / "home"))
    latencies = []
    for i in range(repeats):
        stamp = tmp / f"exit-{i}"
        cli = subprocess.Popen(
            [sys.executable, "-c", "from servepilot.cli.main import run; run()", "launch", "--force", "--",
             sys.executable, str(script), str(stamp), "--port", "1"],
            stdout=subprocess.PIPE, text=True, env=env,
        )
        printed = None
        for line in cli.stdout:
            if line.startswith("root cause:"):
                printed = time.time()
        cli.wait()
        cli.stdout.close()
        if printed is None or not stamp.exists():
            print(f"diagnose: run {i}: no diagnosis line (exit {cli.returncode})")
            continue
        latencies.append(printed - float(stamp.read_text()))
    if latencies:
        print(f"diagnose: exit -> printed diagnosis over {len(latencies)} launches: median "
              f"{statistics.median(latencies) * 1000:.0f} ms, "
              f"max {max(latencies) * 1000:.0f} ms (target < 1000 ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="how long the log grows")
    ap.add_argument("--rate", type=int, default=10_000, help="log lines per second")
    ap.add_argument("--repeats", type=int, default=5, help="failed launches timed for the diagnosis")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {shlex.join(sys.argv)}")
    bench_follow(args.seconds, args.rate)
    bench_diagnose(args.repeats)


if __name__ == "__main__":
    main()
