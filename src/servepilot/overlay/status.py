"""`overlay status`: has the original (or the overlay) changed since servepilot built it?

Patched originals are compared by sha256 (they are small JSON files); linked files by size
and mtime, because hashing 540 GB of weights to answer "did anything move" is not an option.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from servepilot.overlay.errors import OverlayError
from servepilot.overlay.manifest import Manifest, read_manifest, sha256_file
from servepilot.overlay.paths import MANIFEST_NAME


@dataclass(frozen=True)
class Drift:
    """One file that is not as the manifest recorded it."""

    path: str
    side: str  # "original" | "overlay"
    change: str  # "missing" | "changed" | "new"
    detail: str


@dataclass(frozen=True)
class OverlayStatus:
    overlay: str
    original: str
    created: str
    servepilot_version: str
    files_checked: int
    drift: tuple[Drift, ...]
    clean: bool = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "clean", not self.drift)


def overlay_status(overlay_dir: Path) -> OverlayStatus:
    """Compare an overlay's manifest with the original and with the overlay itself."""
    overlay_dir = Path(os.path.abspath(overlay_dir))
    manifest = read_manifest(overlay_dir)
    drift = _original_drift(manifest) + _overlay_drift(manifest, overlay_dir)
    return OverlayStatus(
        overlay=str(overlay_dir),
        original=manifest.original,
        created=manifest.created,
        servepilot_version=manifest.servepilot_version,
        files_checked=len(manifest.linked) + len(manifest.patched),
        drift=tuple(drift),
    )


def _original_drift(manifest: Manifest) -> list[Drift]:
    root = Path(manifest.original)
    if not root.is_dir():
        return [Drift(".", "original", "missing", f"the original directory {root} is gone")]
    out: list[Drift] = []
    for p in manifest.patched:
        f = root / p.path
        if not f.exists():
            out.append(Drift(p.path, "original", "missing", "patched file's original is gone"))
            continue
        try:
            now = sha256_file(f)
        except OverlayError as exc:
            out.append(Drift(p.path, "original", "changed", exc.problem))
            continue
        if now != p.original_sha256:
            out.append(
                Drift(p.path, "original", "changed", f"sha256 was {p.original_sha256[:12]}…, now {now[:12]}…")
            )
    for link in manifest.linked:
        try:
            st = (root / link.path).stat()
        except OSError:
            out.append(Drift(link.path, "original", "missing", "linked file is gone from the original"))
            continue
        if st.st_size != link.size:
            out.append(Drift(link.path, "original", "changed", f"size was {link.size} bytes, now {st.st_size}"))
        elif st.st_mtime_ns != link.mtime_ns:
            out.append(Drift(link.path, "original", "changed", "modified since the overlay was built (same size)"))
    known = {f.path for f in manifest.linked} | {p.path for p in manifest.patched}
    for rel in _files_under(root):
        if rel not in known:
            out.append(Drift(rel, "original", "new", "file added to the original after the overlay was built"))
    return out


def _overlay_drift(manifest: Manifest, overlay_dir: Path) -> list[Drift]:
    out: list[Drift] = []
    for link in manifest.linked:
        o = overlay_dir / link.path
        if not o.is_symlink():
            what = "replaced by a regular file" if o.exists() else "symlink removed"
            out.append(Drift(link.path, "overlay", "missing" if not o.exists() else "changed", what))
        elif os.readlink(o) != link.target:
            out.append(Drift(link.path, "overlay", "changed", f"symlink now points at {os.readlink(o)}"))
    for p in manifest.patched:
        o = overlay_dir / p.path
        if o.is_symlink() or not o.is_file():  # is_file: a FIFO or directory is not the file we wrote
            out.append(Drift(p.path, "overlay", "missing", "patched file removed or replaced by a link"))
        elif sha256_file(o) != p.overlay_sha256:
            out.append(Drift(p.path, "overlay", "changed", "patched file was edited inside the overlay"))
    known = {f.path for f in manifest.linked} | {p.path for p in manifest.patched} | {MANIFEST_NAME}
    for rel in _files_under(overlay_dir):
        if rel not in known:
            out.append(Drift(rel, "overlay", "new", "file servepilot did not write"))
    return out


def _files_under(root: Path) -> list[str]:
    """Every non-directory entry below root (symlinks included, never followed)."""
    found: list[str] = []
    for here, dirnames, filenames in os.walk(root, followlinks=False):
        # a symlink to a directory shows up in dirnames; count it as an entry, do not descend
        entries = list(filenames) + [d for d in dirnames if os.path.islink(os.path.join(here, d))]
        for name in entries:
            found.append(Path(here, name).relative_to(root).as_posix())
    return sorted(found)
