"""corpus/second-rater.jsonl: a log-only second rating of corpus rows (bench/bench_agreement.py)."""

from __future__ import annotations

import json
from pathlib import Path

from servepilot.categories import CATEGORIES

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def _load(name: str) -> list[dict]:
    text = (CORPUS / name).read_text(encoding="utf-8")
    return [json.loads(raw) for raw in text.splitlines() if raw.strip()]


def test_every_second_rating_names_a_corpus_row_a_category_and_one_of_its_lines():
    excerpts = {row["id"]: row for row in _load("excerpts.jsonl")}
    ratings = _load("second-rater.jsonl")
    assert len(ratings) >= 100
    assert len({r["id"] for r in ratings}) == len(ratings), "a row rated twice"
    for rating in ratings:
        row = excerpts.get(rating["id"])
        assert row is not None, f"{rating['id']}: not in excerpts.jsonl"
        assert rating["category"] in CATEGORIES, rating
        assert rating["confidence"] in ("high", "medium", "low"), rating
        assert rating["determinable"] in ("yes", "no"), rating
        assert rating["root_cause_line"] in row["log"].splitlines(), rating["id"]
