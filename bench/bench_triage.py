"""Benchmark `servepilot triage`: top-1 accuracy on the failure corpus, and speed on 1 GB.

Prints figures; it is not a test. Run:
    python bench/bench_triage.py [CORPUS.jsonl ...] [--size-mb 1024] [--keep DIR] [--skip-speed]

Any JSON-lines file whose rows carry `error_excerpt` and `category` (and optionally `id`)
is a corpus: the dev corpus by default, or held-out sets kept outside the repository.

Figures reported (targets from issue 8):
  accuracy     each row's error_excerpt triaged as a log; predicted vs expected category,
               top-1 hit rate (rows without an excerpt are skipped), then per expected
               category: hits/rows and what the misses were predicted as. When triage finds
               no failure, the category of a benign note (a known fallback notice) is the
               prediction, since the row then describes that notice.
  throughput   triage of a generated vLLM-like log (eight workers interleaved, tqdm
               progress bars redrawn with \\r, request lines, the error near the end) in a
               fresh process: MB/s (target >= 150)
  grep         `grep -c Error` on the same file; ratio triage/grep (target within 5x), in
               wall time and in CPU time (on a shared machine the CPU ratio is the stable one;
               files over 256 MB are scanned on several cores, which lowers wall time only)
  peak memory  max RSS of the triage process via resource.getrusage(RUSAGE_CHILDREN)
               (target < 200 MB)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "failures-dev.jsonl"
WORKERS = 8


def accuracy(corpus: Path) -> None:
    from servepilot.triage import triage_text

    if not corpus.is_file():
        print(f"accuracy: skipped, {corpus} not found")
        return
    hits = total = 0
    per_category: dict[str, Counter] = defaultdict(Counter)  # expected -> predicted counts
    print(f"accuracy on {corpus}:")
    for raw in corpus.read_text(encoding="utf-8").splitlines():
        if not raw.strip():
            continue
        row = json.loads(raw)
        excerpt = row.get("error_excerpt")
        if not excerpt:
            print(f"  skip  {row.get('id')}: no error_excerpt")
            continue
        d = triage_text(excerpt)
        if d.root_cause is not None:
            predicted, via = d.root_cause.category, d.root_cause.signature or "unmatched"
        elif d.notes:
            predicted, via = d.notes[0].category, f"note:{d.notes[0].signature}"
        else:
            predicted, via = None, "-"
        ok = predicted == row.get("category")
        hits += ok
        total += 1
        per_category[str(row.get("category"))][str(predicted)] += 1
        print(f"  {'hit ' if ok else 'MISS'}  expected {row.get('category'):<20} got {str(predicted):<20} {via:<34} {row.get('id')}")
    if total:
        print(f"accuracy: top-1 category {hits}/{total} = {hits / total:.1%}")
        for expected in sorted(per_category):
            got = per_category[expected]
            rows = sum(got.values())
            misses = ", ".join(f"{p} x{n}" for p, n in got.most_common() if p != expected)
            print(f"  {expected:<22} {got[expected]}/{rows}" + (f"   missed as: {misses}" if misses else ""))


def _block(rng: random.Random, minute: int) -> bytes:
    """About 1 MB of ordinary serving log: request lines, worker stats, progress bars."""
    lines = []
    size = 0
    while size < 1 << 20:
        r = rng.random()
        ts = f"12-29 15:{minute % 60:02d}:{rng.randrange(60):02d}"
        if r < 0.45:
            line = (
                f"(APIServer pid=1000) INFO {ts} [loggers.py:123] 10.0.0.{rng.randrange(255)}:{rng.randrange(30000, 60000)}"
                f' - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
            )
        elif r < 0.75:
            w = rng.randrange(WORKERS)
            line = (
                f"(Worker_TP{w} pid={2000 + w}) INFO {ts} [gpu_model_runner.py:2345] step {rng.randrange(10**6)}: "
                f"running {rng.randrange(64)} reqs, KV cache usage {rng.random() * 100:.1f}%\n"
            )
        elif r < 0.9:
            line = (
                f"(APIServer pid=1000) INFO {ts} [loggers.py:118] Engine 000: Avg prompt throughput: "
                f"{rng.random() * 5000:.1f} tokens/s, Avg generation throughput: {rng.random() * 900:.1f} tokens/s, "
                f"Running: {rng.randrange(64)} reqs, Waiting: 0 reqs, GPU KV cache usage: {rng.random() * 100:.1f}%, "
                f"Prefix cache hit rate: {rng.random() * 100:.1f}%\n"
            )
        else:
            w = rng.randrange(WORKERS)
            bar = "".join(
                f"\r(Worker_TP{w} pid={2000 + w}) Loading safetensors checkpoint shards: {p:3d}% Completed | "
                f"{p // 10}/10 [00:{p % 60:02d}<00:30, 1.23s/it]"
                for p in range(0, 101, 10)
            )
            line = "\x1b[36m" + bar + "\x1b[0m\n"
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()


def _banner() -> bytes:
    return (
        b"(APIServer pid=1000) INFO 12-29 15:00:00 [api_server.py:1885] vLLM API server version 0.16.0\n"
        b"(EngineCore_DP0 pid=1500) INFO 12-29 15:00:05 [core.py:93] Initializing a V1 LLM engine (v0.16.0) with config: model='m'\n"
    )


def _failure() -> bytes:
    """Eight workers fail together (tracebacks interleaved), the engine core echoes it."""
    frames = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/executor/multiproc_executor.py", line 722, in worker_main',
        "    worker = WorkerProc(*args, **kwargs)",
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3012, in load_model',
        "    self.model = model_loader.load_model(",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 120.00 MiB is free.",
    ]
    out = []
    for frame in frames:
        for w in range(WORKERS):
            out.append(f"(Worker_TP{w} pid={2000 + w}) ERROR 12-29 15:59:58 [multiproc_executor.py:751] {frame}\n")
    out.append(
        "(EngineCore_DP0 pid=1500) ERROR 12-29 15:59:59 [core.py:708] EngineCore failed to start.\n"
        "(APIServer pid=1000) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    return "".join(out).encode()


def generate(path: Path, size_mb: int) -> None:
    rng = random.Random(8)
    blocks = [_block(rng, m) for m in range(4)]
    with path.open("wb") as f:
        f.write(_banner())
        written = 0
        target = size_mb << 20
        i = 0
        while written < target - (2 << 20):
            b = blocks[i % len(blocks)]
            f.write(b)
            written += len(b)
            i += 1
        f.write(_failure())
        f.write(blocks[0][: 1 << 20])  # the error is near the end, not at it


_CHILD = """
import json, sys, time
t = time.perf_counter()
from servepilot.triage import triage_file
d = triage_file(sys.argv[1])
rc = d.root_cause
print(json.dumps({"seconds": time.perf_counter() - t, "category": rc and rc.category,
                  "count": rc and rc.count, "line": rc and rc.line, "lines": d.lines_read}))
"""


def _cpu() -> float:
    """User + system CPU seconds of finished child processes (their workers included)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def speed(size_mb: int, keep: Path | None) -> None:
    workdir = keep or Path(tempfile.mkdtemp(prefix="sp-bench-triage-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "vllm-1g.log"
    try:
        t = time.perf_counter()
        if not log.exists() or log.stat().st_size < (size_mb << 20) * 0.95:
            generate(log, size_mb)
        size = log.stat().st_size
        print(f"\nspeed: {size / 1e6:,.0f} MB log generated in {time.perf_counter() - t:.1f} s ({log})")
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache

        before = _cpu()
        t = time.perf_counter()
        grep = subprocess.run(["grep", "-c", "Error", str(log)], capture_output=True, text=True)
        grep_s = time.perf_counter() - t
        grep_cpu = _cpu() - before

        before = _cpu()
        t = time.perf_counter()
        child = subprocess.run([sys.executable, "-c", _CHILD, str(log)], capture_output=True, text=True)
        wall = time.perf_counter() - t
        triage_cpu = _cpu() - before
        if child.returncode != 0:
            print(child.stderr)
            raise SystemExit("triage failed")
        result = json.loads(child.stdout)
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
        mbps = size / 1e6 / wall
        print(f"  triage      {wall:6.2f} s wall ({result['seconds']:.2f} s in triage_file) = {mbps:,.0f} MB/s  (target >= 150)")
        print(f"              root cause {result['category']} x{result['count']} at line {result['line']:,} of {result['lines']:,}")
        print(f"  grep -c     {grep_s:6.2f} s ({grep.stdout.strip()} lines with 'Error')")
        print(f"  ratio       {wall / grep_s:6.1f}x grep wall time  (target <= 5x)")
        print(f"  cpu         triage {triage_cpu:.2f} s, grep {grep_cpu:.2f} s: {triage_cpu / max(grep_cpu, 1e-3):.1f}x "
              f"(the figure to trust when other jobs share the cores; load average {os.getloadavg()[0]:.1f})")
        print(f"  peak memory {peak_kib / 1024:6.0f} MB max RSS of the triage process  (target < 200 MB)")
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="*", type=Path, default=[DEFAULT_CORPUS])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keep", type=Path, help="keep the generated log in this directory (and reuse it)")
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args()
    for corpus in args.corpus:
        accuracy(corpus)
    if not args.skip_speed:
        speed(args.size_mb, args.keep)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
