"""corpus/log-only-raters/: log-only ratings of corpus rows (bench/bench_agreement.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepilot.categories import CATEGORIES

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
RATER_FILES = sorted((CORPUS / "log-only-raters").rglob("*.jsonl"))


def _load(path: Path) -> list[dict]:
    return [json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()]


def test_there_are_raters_to_compare():
    assert len(RATER_FILES) >= 2


@pytest.mark.parametrize("path", RATER_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_rating_names_a_corpus_row_a_category_and_one_of_its_lines(path):
    excerpts = {row["id"]: row for row in _load(CORPUS / "excerpts.jsonl")}
    ratings = _load(path)
    assert len(ratings) >= 10  # a rated set is a batch's rows at least (the smallest holds 17)
    assert len({r["id"] for r in ratings}) == len(ratings), "a row rated twice"
    for rating in ratings:
        row = excerpts.get(rating["id"])
        assert row is not None, f"{rating['id']}: not in excerpts.jsonl"
        assert rating["category"] in CATEGORIES, rating
        assert rating["confidence"] in ("high", "medium", "low"), rating
        assert rating["determinable"] in ("yes", "no"), rating
        assert rating["root_cause_line"] in row["log"].splitlines(), rating["id"]
