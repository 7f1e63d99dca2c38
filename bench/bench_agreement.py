"""How far the log alone decides a row's label: the corpus labels against a second rater.

The corpus labels (corpus/excerpts.jsonl) were given by gatherers who read whole threads:
maintainers' answers, the fix that worked. Triage sees only the pasted lines. A second rater
was given only what triage gets (engine, version, GPU, model, command and the log; no id, label,
reasoning or note, and no servepilot output) for 160 rows drawn at random (seed 20261203) and
labelled them by the same guide. Their answers are corpus/second-rater.jsonl.

The agreement between the two is a ceiling of sorts for any log reader: where an expert reading
the same lines disagrees with the label, the label rests on something the log does not show.
This script prints that agreement next to triage's on the same rows, by the rater's confidence.
The rows are dev rows (triage was shaped on them), so triage's figure here is not a blind one.

    python bench/bench_agreement.py [--list]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_triage import line_hit, predict  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _rows(path: Path) -> dict[str, dict]:
    with path.open(encoding="utf-8") as f:
        return {row["id"]: row for row in map(json.loads, filter(str.strip, f))}


def main(argv: list[str]) -> int:
    labelled = _rows(CORPUS / "excerpts.jsonl")
    rater = _rows(CORPUS / "second-rater.jsonl")
    missing = sorted(set(rater) - set(labelled))
    if missing:
        print(f"second-rater.jsonl names rows the corpus lacks: {', '.join(missing[:5])}", file=sys.stderr)
        return 2
    n = len(rater)
    rater_label = triage_label = triage_rater = rater_line = 0
    by_confidence: dict[str, list[int]] = {}
    disagreements: Counter[tuple[str, str]] = Counter()
    listing = []
    for row_id, second in rater.items():
        row = labelled[row_id]
        got, _via, got_line = predict(row)
        agree = second["category"] == row["category"]
        rater_label += agree
        triage_label += got == row["category"]
        triage_rater += got == second["category"]
        rater_line += bool(line_hit(row["root_cause_line"], second["root_cause_line"]))
        tally = by_confidence.setdefault(second["confidence"], [0, 0, 0])
        tally[0] += agree
        tally[1] += got == row["category"]
        tally[2] += 1
        if not agree:
            disagreements[(row["category"], second["category"])] += 1
            listing.append(f"  {row_id[:50]:50} label {row['category']:20} rater {second['category']:20} triage {got}")
    print(f"{n} rows rated from the log alone (dev rows: triage was shaped on them)")
    print(f"  second rater agrees with the label: {rater_label}/{n} = {rater_label / n:.1%}")
    print(f"  triage agrees with the label:       {triage_label}/{n} = {triage_label / n:.1%}")
    print(f"  triage agrees with the rater:       {triage_rater}/{n} = {triage_rater / n:.1%}")
    print(f"  same root-cause line, rater and label: {rater_line}/{n}")
    for level in ("high", "medium", "low"):
        if level in by_confidence:
            agree, hits, total = by_confidence[level]
            print(
                f"  rater's confidence {level:6}: {total:3} rows; "
                f"rater = label {agree}/{total}, triage = label {hits}/{total}"
            )
    print("label -> second rater, where they differ:")
    for (label, second), count in disagreements.most_common():
        print(f"  {label:22} -> {second:22} x{count}")
    if "--list" in argv:
        print("\n".join(listing))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
