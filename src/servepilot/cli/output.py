"""Rendering helpers shared by the verbs: JSON to stdout, rich text made lazily."""

from __future__ import annotations

import json
import sys
from typing import Any

from servepilot.jsonable import to_jsonable
from servepilot.units import gib as gib  # re-exported: the CLI's byte formatters live in units
from servepilot.units import human_bytes as human_bytes


def emit_json(schema: str, payload: dict[str, Any]) -> None:
    """Print one JSON object with the top-level "schema" key first (DESIGN.md contract)."""
    obj = {"schema": schema}
    obj.update(to_jsonable(payload))
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def console(stderr: bool = False):
    """A rich Console; imported on first use so commands that print JSON never pay for it."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def print_rows(rows, styles: dict[str, str] | None = None, title: str | None = None) -> None:
    """Print (label, value) rows as two columns; a long value wraps under itself, never under
    the label. `styles` colours the values of some labels ("PROBLEM": "bold red")."""
    from rich.markup import escape
    from rich.table import Table

    styles = styles or {}
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for label, value in rows:
        text = escape(str(value))
        grid.add_row(label, f"[{styles[label]}]{text}[/]" if label in styles else text)
    out = console()
    if title is not None:
        out.print(title)
    out.print(grid)
