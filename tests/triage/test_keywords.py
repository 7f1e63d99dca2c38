"""Unknown errors: the category read from their words (keywords.yaml), never their rank."""

from __future__ import annotations

import pytest

from servepilot.categories import CATEGORIES
from servepilot.triage import triage_text
from servepilot.triage.keywords import (
    KeywordDataError,
    guess_category,
    load_keyword_families,
    parse_keyword_rows,
)


def test_every_family_names_a_design_category_once():
    families = load_keyword_families()
    assert len(families) >= 10
    assert all(f.category in CATEGORIES for f in families)
    assert len({f.category for f in families}) == len(families)


def test_a_family_with_an_unknown_category_or_a_bad_pattern_is_rejected():
    with pytest.raises(KeywordDataError):
        parse_keyword_rows([{"category": "gremlins", "pattern": "x", "why": "y"}])
    with pytest.raises(KeywordDataError):
        parse_keyword_rows([{"category": "shm", "pattern": "(", "why": "y"}])


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("AssertionError: the flashinfer attention backend cannot run this model", "attention_backend"),
        ("RuntimeError: could not build the tokenizer from tokenizer.model", "tokenizer_template"),
        ("ValueError: kv cache dtype int4 is not available here", "kv_cache_dtype"),
        ("ValueError: hidden size 5120 is not divisible by 3", "tp_divisibility"),
        ("RuntimeError: ran out of memory while reserving the KV cache pool", "oom_kv_cache"),
    ],
)
def test_an_unknown_error_is_filed_by_its_words(message, category):
    assert guess_category(message)[0] == category
    rc = triage_text(message).root_cause
    assert rc is not None
    assert (rc.category, rc.signature) == (category, None)  # a guess, not a match
    assert "guess" in rc.explanation


def test_an_unknown_error_without_telling_words_stays_other():
    rc = triage_text("RuntimeError: something odd happened in step 7").root_cause
    assert rc is not None and rc.category == "other"


def test_the_guess_does_not_move_an_unknown_error_ahead_of_a_known_cause():
    log = "\n".join(
        [
            "RuntimeError: the flashinfer attention backend hit an odd state",
            "ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (3).",
        ]
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "tp_divisibility"
