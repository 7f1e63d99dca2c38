"""A category for an error no signature knows, read from the words of its message.

Signatures (signatures.yaml) name exact engine messages; the long tail of messages they do
not know still usually says which part of a launch failed ("... attention backend ...",
"... tokenizer ..."). keywords.yaml lists one word family per DESIGN.md category, narrowest
first. The guess only labels an unknown error: it never changes which error is the root
cause, and the error keeps `signature: null` so a reader can tell a guess from a match.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from servepilot.categories import check_category


@dataclass(frozen=True)
class KeywordFamily:
    category: str
    pattern: re.Pattern[str]
    why: str


class KeywordDataError(ValueError):
    """keywords.yaml is malformed (a packaging bug, caught by the test suite)."""


def parse_keyword_rows(rows: list) -> tuple[KeywordFamily, ...]:
    if not isinstance(rows, list):
        raise KeywordDataError("keywords.yaml must hold a list of families")
    families = []
    for row in rows:
        try:
            check_category(row["category"])
            families.append(KeywordFamily(row["category"], re.compile(row["pattern"], re.IGNORECASE), row["why"]))
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise KeywordDataError(f"keyword family {row!r:.80}: {exc}") from exc
    return tuple(families)


@functools.cache
def load_keyword_families() -> tuple[KeywordFamily, ...]:
    from servepilot.datafile import load_yaml_resource

    return parse_keyword_rows(load_yaml_resource("servepilot.triage", "keywords.yaml"))


def guess_category(message: str, families: tuple[KeywordFamily, ...] | None = None) -> tuple[str, str] | None:
    """(category, the words that decided it) for an unknown error message, or None."""
    for family in families if families is not None else load_keyword_families():
        m = family.pattern.search(message)
        if m:
            return family.category, m.group(0)
    return None
