"""A run's log to its diagnosis, through triage: the one edge from runs/ to triage/.

Kept apart from runs/integration.py so that `ps`, which triages the log of a run whose
supervisor died, does not load check, planning and the deployment layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servepilot.jsonable import to_jsonable
from servepilot.triage import triage_file
from servepilot.triage.signatures import load_signatures


def triage_log(path: Path, engine: str | None) -> dict[str, Any]:
    """The diagnosis of a failed run's log as a JSON-ready dict (contract keys of DESIGN.md)."""
    try:
        return to_jsonable(triage_file(path, engine=engine))
    except Exception as exc:  # noqa: BLE001 - the run failed either way; a triage bug must not hide it
        return {"root_cause": None, "remedies": [], "other_errors": [], "stale": False,
                "error": f"triage failed on {path} ({type(exc).__name__}: {exc}); read the log itself"}


def warm_triage() -> None:
    """Import triage and parse its signature table ahead of need (about 0.1-0.2 s), so the
    diagnosis of an engine that dies prints without that delay."""
    try:
        load_signatures()
    except Exception:  # noqa: BLE001 - warming is best effort; triage_log reports real errors
        pass
