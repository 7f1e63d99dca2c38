"""Every corpus row (corpus/ in the repository): no traceback, and an answer names its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepilot.triage import triage_text
from servepilot.triage.lines import parse_line

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def _rows():
    for path in sorted(CORPUS.glob("*.jsonl")):
        for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if raw.strip():
                row = json.loads(raw)
                if row.get("log_file"):
                    row["log"] = (CORPUS / row["log_file"]).read_bytes().decode("utf-8", errors="replace")
                if not row.get("log"):
                    continue  # a row kept for its labels (check), its scored text in `note`
                yield pytest.param(row, id=f"{path.stem}:{n}:{row.get('id')}")


ROWS = list(_rows())


def test_the_corpus_is_there():
    assert len(ROWS) >= 100


@pytest.mark.parametrize("row", ROWS)
def test_every_answer_rests_on_a_line_of_its_own_log(row):
    d = triage_text(row["log"])  # any exception here is a traceback a user would see
    if row.get("category") is None:  # a healthy log: no failure may be invented from its warnings
        assert d.root_cause is None
        return
    cause = d.root_cause or (d.notes[0] if d.notes else None)
    if cause is None:
        # No answer on a failing row is a miss, and bench/bench_triage.py counts it as one
        # (predicted None); what this test guards is that an answer, when given, is one a
        # user can check against the log.
        return
    lines = row["log"].split("\n")  # as triage counts lines
    assert 1 <= cause.line <= len(lines)
    # the line named is the one whose words the answer quotes
    named = parse_line(lines[cause.line - 1]).message.strip()
    assert named and (named[:60] in cause.message or named[:60] in cause.excerpt or cause.message[:60] in named)
    assert 0 < cause.confidence <= 1
