"""How far the log alone decides a row's label: the corpus labels against log-only raters.

The corpus labels (corpus/excerpts.jsonl) were given by gatherers who read whole threads:
maintainers' answers, the fix that worked. Triage sees only the pasted lines. Two raters, each
working alone, were given only what triage gets (engine, version, GPU, model, command and the
log; no id, label, reasoning or note, and no servepilot output) for the same 160 rows drawn at
random (seed 20261203) and labelled them by the same guide. Their answers are
corpus/log-only-raters/*.jsonl.

Where readers of the same lines disagree with the label, the label rests on something the log
does not show (or is wrong). The script prints each rater against the label, the raters against
each other, and triage against all of them on the same rows. The rows are dev rows (triage was
shaped on them), so triage's figure here is not a blind one.

    python bench/bench_agreement.py [RATERS_DIR] [--list]

RATERS_DIR defaults to corpus/log-only-raters (160 random dev rows); corpus/log-only-raters/
held-round5 (and -late) and held-round6 (and -late) hold two ratings of each round's held rows,
whose first scores were blind; round6-r10 two of the sixth round's first-scored rows.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_triage import line_hit, predict  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
RATERS = CORPUS / "log-only-raters"


def _rows(path: Path) -> dict[str, dict]:
    with path.open(encoding="utf-8") as f:
        return {row["id"]: row for row in map(json.loads, filter(str.strip, f))}


def _share(hits: int, total: int) -> str:
    return f"{hits}/{total} = {hits / total:.1%}"


def main(argv: list[str]) -> int:
    labelled = _rows(CORPUS / "excerpts.jsonl")
    folders = [Path(arg) for arg in argv[1:] if not arg.startswith("--")]
    folder = folders[0] if folders else RATERS
    raters = {path.stem: _rows(path) for path in sorted(folder.glob("*.jsonl"))}
    if not raters:
        print(f"{folder}: no rater files", file=sys.stderr)
        return 2
    ids = sorted(set.intersection(*(set(answers) for answers in raters.values())))
    missing = sorted(set(ids) - set(labelled))
    if missing:
        print(f"{folder}: rows the corpus lacks: {', '.join(missing[:5])}", file=sys.stderr)
        return 2
    if not ids:
        print(f"{folder}: the rater files share no rows", file=sys.stderr)
        return 2
    triage = {row_id: predict(labelled[row_id])[0] for row_id in ids}
    n = len(ids)
    print(f"{n} rows rated from the log alone by {len(raters)} raters ({folder.name})")
    for name, answers in raters.items():
        agree = sum(answers[i]["category"] == labelled[i]["category"] for i in ids)
        lines = sum(
            bool(line_hit(labelled[i]["root_cause_line"], answers[i]["root_cause_line"]))
            for i in ids
        )
        print(f"  {name} = label: {_share(agree, n)} (same root-cause line {lines}/{n})")
    names = list(raters)
    for k, first in enumerate(names):
        for second in names[k + 1:]:
            agree = sum(raters[first][i]["category"] == raters[second][i]["category"] for i in ids)
            print(f"  {first} = {second}: {_share(agree, n)}")
    print(f"  triage = label: {_share(sum(triage[i] == labelled[i]['category'] for i in ids), n)}")
    for name, answers in raters.items():
        same = sum(triage[i] == answers[i]["category"] for i in ids)
        print(f"  triage = {name}: {_share(same, n)}")

    # rows where every rater reads the lines the same way and the label says otherwise
    def unanimous_reading(i: str) -> str | None:
        readings = {answers[i]["category"] for answers in raters.values()}
        return readings.pop() if len(readings) == 1 else None

    against = [i for i in ids if unanimous_reading(i) not in (None, labelled[i]["category"])]
    unanimous = sum(unanimous_reading(i) is not None for i in ids)
    print(f"  raters unanimous on {unanimous}/{n} rows; "
          f"unanimous against the label on {len(against)}")
    pairs = Counter((labelled[i]["category"], unanimous_reading(i)) for i in against)
    for (label, read), count in pairs.most_common():
        print(f"    label {label:22} raters {read:22} x{count}")
    if "--list" in argv:
        for i in against:
            print(f"    {i[:50]:50} label {labelled[i]['category']:20} triage {triage[i]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
