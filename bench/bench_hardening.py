"""Hardening figures over the fault-injection and hostile-input suites.

    python bench/bench_hardening.py [extra pytest args]

Runs tests/runs/test_faults.py, tests/test_hostile_inputs.py and tests/checks/test_flag_values.py
in a fresh pytest process (its own --basetemp, so every run's state directory is kept for
inspection), then prints:

- scenarios: test cases run (each parametrized case counts once);
- orphans: processes still alive afterwards that carry a run's marker (SERVEPILOT_RUN_ID)
  of one of the suite's runs, or that started during the suite and carry any marker;
- lost records: attempts whose record is missing or wrong: a run directory with a log but
  no history row, a history row still `starting`/`ready` with nothing of it alive, or a
  run.json that does not parse;
- tracebacks: test failures that were an exception escaping servepilot (anything but an
  assertion), plus "Traceback" printed by a verb;
- the slowest scenarios (time bounds live here, not in the tests).

Targets (issue 17): 0 orphans, 0 lost records, 0 tracebacks.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SUITES = ["tests/runs/test_faults.py", "tests/test_hostile_inputs.py", "tests/checks/test_flag_values.py"]
MARKER = b"SERVEPILOT_RUN_ID="
LIVE_STATES = ("starting", "ready")


def marked_processes() -> dict[int, str]:
    """pid -> run id of every live process carrying a run marker."""
    out = {}
    for p in psutil.process_iter(["pid"]):
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as fh:
                for item in fh.read().split(b"\0"):
                    if item.startswith(MARKER) and p.status() != psutil.STATUS_ZOMBIE:
                        out[p.pid] = item[len(MARKER):].decode(errors="replace")
        except (OSError, psutil.Error):
            continue
    return out


def histories(base: Path) -> list[Path]:
    return sorted(base.rglob("history.sqlite3"))


def run_rows(db_path: Path) -> list[dict]:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM runs")]
    except sqlite3.DatabaseError:
        return []  # a test's deliberately broken history
    finally:
        db.close()


def lost_records(base: Path, alive_ids: set[str]) -> list[str]:
    problems = []
    for db_path in histories(base):
        rows = run_rows(db_path)
        by_id = {r["id"]: r for r in rows}
        runs_root = db_path.parent / "runs"
        for run_dir in sorted(runs_root.glob("*")) if runs_root.is_dir() else []:
            if not (run_dir / "server.log").exists():
                continue  # never started (a refused or failed creation leaves no log)
            row = by_id.get(run_dir.name)
            if row is None:
                problems.append(f"{run_dir}: an attempt with a log but no history row")
                continue
            if row["state"] in LIVE_STATES and run_dir.name not in alive_ids:
                problems.append(f"{run_dir}: history says {row['state']} and nothing of it is alive")
            record = run_dir / "run.json"
            if record.exists():
                try:
                    json.loads(record.read_text())
                except ValueError:
                    problems.append(f"{record}: does not parse")
    return problems


def tracebacks(junit: ET.Element) -> list[str]:
    found = []
    for case in junit.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        for bad in [*case.findall("failure"), *case.findall("error")]:
            kind = (bad.get("message") or "").split(":")[0]
            text = bad.text or ""
            if "AssertionError" not in kind and "assert" not in (bad.get("message") or "")[:200]:
                found.append(f"{name}: {kind}")
            elif "Traceback (most recent call last)" in text and "servepilot" in text.split("Traceback")[-1][:4000]:
                found.append(f"{name}: a verb printed a traceback")
        for out in case.findall("system-err"):
            if "Traceback (most recent call last)" in (out.text or ""):
                found.append(f"{name}: traceback on stderr")
    return found


def main(argv: list[str]) -> int:
    base = Path(tempfile.mkdtemp(prefix="bench-hardening-"))
    junit_path = base / "junit.xml"
    before = set(marked_processes())
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={base / 'tmp'}",
         f"--junitxml={junit_path}", "-o", "junit_logging=system-err", *SUITES, *argv],
        cwd=ROOT, capture_output=True, text=True,
    )
    wall = time.monotonic() - started
    junit = ET.parse(junit_path).getroot()
    cases = list(junit.iter("testcase"))
    failed = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None]
    # The kernel needs a moment to reap what the last scenario stopped.
    deadline = time.monotonic() + 10
    while True:
        leftover = {pid: rid for pid, rid in marked_processes().items() if pid not in before}
        if not leftover or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    lost = lost_records(base, set(leftover.values()))
    attempts = sum(1 for _ in base.rglob("runs/*/server.log"))
    tbs = tracebacks(junit)

    print(f"scenarios:     {len(cases)}  ({len(cases) - len(failed) - len(skipped)} passed, "
          f"{len(failed)} failed, {len(skipped)} skipped) in {wall:.0f} s")
    print(f"orphans:       {len(leftover)}" + (f"  {sorted(leftover.items())[:10]}" if leftover else ""))
    print(f"lost records:  {len(lost)}  (of {attempts} attempts with a log, in {len(histories(base))} histories)")
    for p in lost[:10]:
        print(f"  - {p}")
    print(f"tracebacks:    {len(tbs)}")
    for t in tbs[:10]:
        print(f"  - {t}")
    slow = sorted(cases, key=lambda c: float(c.get("time") or 0), reverse=True)[:5]
    print("slowest:       " + ", ".join(f"{c.get('name')} {float(c.get('time')):.1f} s" for c in slow))
    for c in failed[:10]:
        bad = c.find("failure") if c.find("failure") is not None else c.find("error")
        print(f"  FAILED {c.get('name')}: {(bad.get('message') or '')[:200]}")
    print(f"state kept in: {base}")
    if proc.returncode not in (0, 1):
        print(proc.stdout[-2000:], proc.stderr[-2000:])
    targets_met = not leftover and not lost and not tbs
    print("targets (0 orphans, 0 lost records, 0 tracebacks): " + ("met" if targets_met else "NOT met"))
    return 0 if targets_met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
