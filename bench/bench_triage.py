"""Benchmark `servepilot triage`: top-1 accuracy on the failure corpus, and speed on 1 GB.

Prints figures; it is not a test. Run:
    python bench/bench_triage.py [CORPUS.jsonl ...] [--size-mb 1024] [--keep DIR] [--skip-speed] [--verbose]
                                 [--wrappers]

The corpus is the repository's corpus/ (excerpts.jsonl, full-logs.jsonl; corpus/README.md):
rows with `log` (or the older `error_excerpt`), `category`, `root_cause_line` and `split`.
Blind rows (a batch frozen before any change made for it) and dev rows are scored apart.

Figures reported (targets from issues 8 and 13):
  accuracy     each row's log triaged as text; top-1 category and whether the answer's line
               is the row's root-cause line, for BLIND and DEV separately and per kind
               (excerpt, full_log), then a confusion matrix per engine (expected ->
               predicted). When triage finds no failure, the category of a benign note (a
               known fallback notice) is the prediction, since the row then describes it.
  throughput   triage of a generated vLLM-like log (eight workers interleaved, tqdm
               progress bars redrawn with \\r, request lines, the error near the end) in a
               fresh process: MB/s (target >= 150)
  grep         `grep -c Error` on the same file; ratio triage/grep (target within 5x), in
               wall time and in CPU time (on a shared machine the CPU ratio is the stable one;
               files over 256 MB are scanned on several cores, which lowers wall time only)
  peak memory  max RSS of the triage process via resource.getrusage(RUSAGE_CHILDREN)
               (target < 200 MB)
  wrappers     (--wrappers) every full log triaged again under each tool's line prefix (docker
               compose, docker logs -t, kubectl --prefix, journald, srun --label, CRLF): how many
               answers change (target 0: the tools around an engine do not change its failure)
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

CORPUS_DIR = Path(__file__).resolve().parents[1] / "corpus"
DEFAULT_CORPUS = [CORPUS_DIR / "excerpts.jsonl", CORPUS_DIR / "full-logs.jsonl"]
WORKERS = 8


def load_rows(path: Path) -> list[dict]:
    """Corpus rows: `log` (or the older `error_excerpt`), `category`, and `split` (dev | blind)."""
    from servepilot.triage.api import decode_log_bytes

    rows = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.strip():
            row = json.loads(raw)
            row.setdefault("log", row.get("error_excerpt"))
            row.setdefault("split", "dev")
            if row.get("log_file"):  # full logs live beside the index, one file each
                # bytes, not read_text: universal newlines would turn a progress bar's \r into lines
                # (and decoded as triage_file decodes it: a UTF-16 log saved by PowerShell too)
                row["log"] = decode_log_bytes((path.parent / row["log_file"]).read_bytes())
            rows.append(row)
    return rows


def predict(row: dict) -> tuple[str | None, str, str | None]:
    """(category, via, the text of the line the answer rests on) for one corpus row.

    A row whose category is null is a healthy log: the right answer is no root cause.
    """
    from servepilot.triage import triage_text

    d = triage_text(row["log"], engine=None)
    cause = d.root_cause
    if row.get("category") is None:
        return (
            (None, "healthy" if d.healthy else "no error", None)
            if cause is None
            else (cause.category, cause.signature or "unmatched", None)
        )
    if cause is None and d.notes:
        cause = d.notes[0]
        via = f"note:{cause.signature}"
    else:
        via = (cause.signature or "unmatched") if cause else "-"
    if cause is None:
        return None, via, None
    lines = row["log"].split("\n")  # as triage counts them: a progress bar's \r is no line end
    text = lines[cause.line - 1] if 0 < cause.line <= len(lines) else None
    return cause.category, via, text


def line_hit(expected: str | None, got: str | None) -> bool | None:
    """Whether the answer rests on the row's root-cause line (None: the row names no line)."""
    if not expected:
        return None
    if not got:
        return False
    from servepilot.triage.lines import parse_line

    # the same message printed with other prefixes (an ERROR-level copy of a traceback's last line)
    a, b = parse_line(expected.strip()).message.strip(), parse_line(got.strip()).message.strip()
    return a in b or (len(b) > 20 and b in a)


def accuracy(paths: list[Path], verbose: bool) -> None:
    rows = [row for p in paths if p.is_file() for row in load_rows(p)]
    if not rows:
        print("accuracy: skipped, no corpus rows found")
        return
    # split -> [hits, total, line hits, line rows]; (split, engine) -> expected -> predicted counts
    score: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    kinds: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    confusion: dict[tuple[str, str], dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for row in rows:
        if not row.get("log"):
            continue
        predicted, via, text = predict(row)
        ok = predicted == row["category"]
        on_line = line_hit(row.get("root_cause_line"), text)
        for table in (score[row["split"]], kinds[(row["split"], row.get("kind", "excerpt"))]):
            table[0] += ok
            table[1] += 1
            if on_line is not None:
                table[2] += on_line
                table[3] += 1
        # a healthy row (category null) answered with no root cause is a hit: show it as such
        shown = str(predicted or "healthy") if row["category"] is None else str(predicted)
        confusion[(row["split"], row.get("engine") or "?")][str(row["category"] or "healthy")][shown] += 1
        if verbose or not ok:
            mark = "hit " if ok else "MISS"
            line_mark = {True: "line ok", False: "LINE MISS", None: ""}[on_line]
            print(
                f"  {mark} [{row['split']:<5}] expected {str(row['category'] or 'healthy'):<20} got "
                f"{str(predicted):<20} "
                f"{via:<34} {line_mark:<9} {row.get('id')}"
            )
    for split in ("blind", "dev"):
        if split not in score:
            continue
        hits, total, lhits, lrows = score[split]
        print(f"\n{split.upper()}: top-1 category {hits}/{total} = {hits / total:.1%}; "
              f"root-cause line {lhits}/{lrows} = {lhits / max(lrows, 1):.1%}")
        for (sp, kind), (h, t, lh, lr) in sorted(kinds.items()):
            if sp == split:
                print(f"  {kind:<9} category {h}/{t} = {h / t:.1%}; line {lh}/{lr} = {lh / max(lr, 1):.1%}")
        for (sp, engine), table in sorted(confusion.items()):
            if sp != split:
                continue
            print(f"  confusion, {engine} (expected -> predicted):")
            for expected in sorted(table):
                got = table[expected]
                rows_n = sum(got.values())
                misses = ", ".join(f"{p} x{n}" for p, n in got.most_common() if p != expected)
                print(f"    {expected:<22} {got[expected]}/{rows_n}" + (f"   -> {misses}" if misses else ""))


# How the same log reaches a user through the tools around an engine: each wrapper prefixes every
# line (or changes its line ends) and must not change the answer. Stamps and names are fixed.
def _prefixed(prefix: str):
    return lambda text: "\n".join(prefix + line if line else line for line in text.split("\n"))


WRAPPERS = {
    "docker compose": _prefixed("vllm-1  | "),
    "docker logs -t": _prefixed("2026-06-10T07:31:04.123456789Z "),
    "kubectl --prefix": _prefixed("[pod/vllm-0/vllm] "),
    "journald": _prefixed("Jun 10 07:31:04 gpu-node vllm[1234]: "),
    "journald short-iso": _prefixed("2026-06-10T07:31:04+0000 gpu-node vllm[1234]: "),
    "srun --label": _prefixed("0: "),
    "CRLF line ends": lambda text: text.replace("\n", "\r\n"),
}


def _answer(text: str) -> tuple[str | None, str | None]:
    """(category, message of the line the answer rests on) of a log, prefixes aside."""
    from servepilot.triage import triage_text
    from servepilot.triage.lines import parse_line

    cause = triage_text(text, engine=None).root_cause
    if cause is None:
        return None, None
    lines = text.split("\n")
    line = lines[cause.line - 1] if 0 < cause.line <= len(lines) else ""
    return cause.category, parse_line(line).message.strip()


def wrappers(paths: list[Path], verbose: bool) -> None:
    """How many full logs get another answer when a wrapper's prefix is put on every line."""
    rows = [row for p in paths if p.is_file() for row in load_rows(p) if row.get("log_file")]
    if not rows:
        print("wrappers: skipped, no full logs found")
        return
    plain = {row["id"]: _answer(row["log"]) for row in rows}
    print(f"\nwrappers: full logs whose answer (category and line) changes under a wrapper, "
          f"of {len(rows)}")
    for name, wrap in WRAPPERS.items():
        changed = [row["id"] for row in rows if _answer(wrap(row["log"])) != plain[row["id"]]]
        print(f"  {name:<20} {len(changed)}")
        if verbose:
            for row_id in changed:
                print(f"    {row_id}")


def _block(rng: random.Random, minute: int) -> bytes:
    """About 1 MB of ordinary serving log: request lines, worker stats, progress bars."""
    lines = []
    size = 0
    while size < 1 << 20:
        r = rng.random()
        ts = f"12-29 15:{minute % 60:02d}:{rng.randrange(60):02d}"
        if r < 0.45:
            line = (
                f"(APIServer pid=1000) INFO {ts} [loggers.py:123] "
                f"10.0.0.{rng.randrange(255)}:{rng.randrange(30000, 60000)}"
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
        b"(EngineCore_DP0 pid=1500) INFO 12-29 15:00:05 [core.py:93] Initializing a V1 LLM engine (v0.16.0) with "
        b"config: model='m'\n"
    )


def _failure() -> bytes:
    """Eight workers fail together (tracebacks interleaved), the engine core echoes it."""
    frames = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/executor/multiproc_executor.py", line 722, in worker_main',
        "    worker = WorkerProc(*args, **kwargs)",
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3012, in load_model',
        "    self.model = model_loader.load_model(",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 120.00 MiB is free.",
    ]
    out = []
    for frame in frames:
        for w in range(WORKERS):
            out.append(f"(Worker_TP{w} pid={2000 + w}) ERROR 12-29 15:59:58 [multiproc_executor.py:751] {frame}\n")
    out.append(
        "(EngineCore_DP0 pid=1500) ERROR 12-29 15:59:59 [core.py:708] EngineCore failed to start.\n"
        "(APIServer pid=1000) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}\n"
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
        print(
            f"  triage      {wall:6.2f} s wall ({result['seconds']:.2f} s in triage_file) = {mbps:,.0f} MB/s  (target "
            f">= 150)"
        )
        print(
            f"              root cause {result['category']} x{result['count']} at line {result['line']:,} of "
            f"{result['lines']:,}"
        )
        print(f"  grep -c     {grep_s:6.2f} s ({grep.stdout.strip()} lines with 'Error')")
        print(f"  ratio       {wall / grep_s:6.1f}x grep wall time  (target <= 5x)")
        print(
            f"  cpu         triage {triage_cpu:.2f} s, grep {grep_cpu:.2f} s: {triage_cpu / max(grep_cpu, 1e-3):.1f}x "
            f"(the figure to trust when other jobs share the cores; load average {os.getloadavg()[0]:.1f})"
        )
        print(f"  peak memory {peak_kib / 1024:6.0f} MB max RSS of the triage process  (target < 200 MB)")
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="*", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--verbose", action="store_true", help="print every row, not only the misses")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keep", type=Path, help="keep the generated log in this directory (and reuse it)")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--wrappers", action="store_true",
                    help="also triage every full log under each wrapper's line prefix and count "
                         "changed answers")
    args = ap.parse_args()
    accuracy(args.corpus, args.verbose)
    if args.wrappers:
        wrappers(args.corpus, args.verbose)
    if not args.skip_speed:
        speed(args.size_mb, args.keep)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
