"""Patched JSON is written in the original's layout, so diffs show only what changed."""

from __future__ import annotations

import json
import string

from hypothesis import given
from hypothesis import strategies as st

from servepilot.overlay.jsonstyle import detect_style

# Plain text keys and values: quotes, commas and colons inside strings could mimic a
# separator, and detection only has to be right for the layouts checkpoints are written in.
TEXT = st.text(alphabet=string.ascii_letters + string.digits + "_-. ", max_size=12)
SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | TEXT
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(
    doc=st.dictionaries(TEXT, DOCS, min_size=1, max_size=5),
    indent=st.sampled_from([None, 2, 4, "\t"]),
    newline=st.booleans(),
)
def test_detected_style_reproduces_the_original_text(doc, indent, newline):
    text = json.dumps(doc, indent=indent) + ("\n" if newline else "")
    assert detect_style(text).dumps(json.loads(text)) == text


def test_compact_json_stays_compact():
    text = json.dumps({"a": [1, 2], "b": {"c": None}}, separators=(",", ":"))
    assert detect_style(text).dumps({"a": [1, 2]}) == '{"a":[1,2]}'


def test_non_ascii_text_is_kept_unescaped():
    text = json.dumps({"name": "Kimi — K2.5"}, ensure_ascii=False, indent=2)
    assert detect_style(text).dumps(json.loads(text)) == text
    escaped = json.dumps({"name": "Kimi — K2.5"}, indent=2)
    assert detect_style(escaped).dumps(json.loads(escaped)) == escaped
