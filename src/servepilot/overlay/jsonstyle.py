"""Write patched JSON the way the original was written (indent, separators, final newline).

Operators diff overlay files against the original by eye; keeping the original's layout
keeps that diff down to the keys that changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class JsonStyle:
    indent: int | str | None  # None: one line
    item_separator: str
    key_separator: str
    ensure_ascii: bool
    trailing_newline: bool

    def dumps(self, value: object) -> str:
        text = json.dumps(
            value,
            indent=self.indent,
            separators=(self.item_separator, self.key_separator),
            ensure_ascii=self.ensure_ascii,
        )
        return text + "\n" if self.trailing_newline else text


def detect_style(text: str) -> JsonStyle:
    """Guess the original's layout from its text; falls back to json.dumps defaults."""
    lines = text.splitlines()
    indent: int | str | None = None
    if len(lines) > 1:
        indent = 0
        for line in lines[1:]:
            body = line.lstrip(" \t")
            if body and len(body) < len(line):
                lead = line[: len(line) - len(body)]
                indent = "\t" if lead.startswith("\t") else len(lead)
                break
    key_sep = ": " if '": ' in text else ":"
    if indent is None:
        item_sep = ", " if ", " in text else ","
    else:
        item_sep = ","  # multi-line JSON puts the newline after the comma
    return JsonStyle(
        indent=indent,
        item_separator=item_sep,
        key_separator=key_sep,
        ensure_ascii=text.isascii(),
        trailing_newline=text.endswith("\n"),
    )
