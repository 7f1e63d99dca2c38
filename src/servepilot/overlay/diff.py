"""`overlay diff`: the RFC 6902 patches of an overlay and the unified diff they produce."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from servepilot.overlay.manifest import read_manifest


@dataclass(frozen=True)
class FileDiff:
    path: str
    patch: tuple  # RFC 6902 operations
    unified: str  # original file → overlay file; "" when either side is unreadable
    note: str | None = None  # why `unified` is empty


@dataclass(frozen=True)
class OverlayDiff:
    overlay: str
    original: str
    files: tuple[FileDiff, ...]


def overlay_diff(overlay_dir: Path) -> OverlayDiff:
    """Read the manifest's patches and diff each patched file against its original."""
    overlay = Path(os.path.abspath(overlay_dir))
    manifest = read_manifest(overlay)
    files = []
    for p in manifest.patched:
        before = _read_text(Path(manifest.original) / p.path)
        after = _read_text(overlay / p.path)
        if before is None or after is None:
            side = "original" if before is None else "overlay"
            files.append(FileDiff(p.path, p.patch, "", f"the {side} file is missing or not UTF-8"))
            continue
        unified = "".join(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=f"original/{p.path}",
                tofile=f"overlay/{p.path}",
            )
        )
        files.append(FileDiff(p.path, p.patch, unified))
    return OverlayDiff(str(overlay), manifest.original, tuple(files))


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
