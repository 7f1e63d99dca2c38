"""The overlay manifest (.servepilot-overlay.json): what servepilot made and from what.

It is the only proof that a directory is servepilot's, so `status` and `remove` read it
and nothing else; its paths are validated on load like any outside input, because a
hand-edited manifest must never steer `remove` outside the overlay.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from servepilot.overlay.errors import NotAnOverlay, OverlayError
from servepilot.overlay.paths import MANIFEST_NAME, safe_relpath

MANIFEST_SCHEMA = "servepilot.overlay-manifest/1"


@dataclass(frozen=True)
class LinkedFile:
    """A file the overlay links to; size and mtime of the original prove it unchanged."""

    path: str
    target: str  # the symlink's text: relative to the link (absolute in older overlays, still read)
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class PatchedFile:
    """A JSON file the overlay wrote fresh from the original plus an RFC 6902 patch."""

    path: str
    patch: tuple  # RFC 6902 operations, as given
    original_sha256: str
    original_size: int
    overlay_sha256: str  # of what servepilot wrote, so edits inside the overlay show too


@dataclass(frozen=True)
class Manifest:
    original: str  # absolute path of the original checkpoint directory
    patches_hash: str
    dirs: tuple[str, ...]  # sub-directories servepilot created, parents first
    linked: tuple[LinkedFile, ...]
    patched: tuple[PatchedFile, ...]
    servepilot_version: str
    created: str  # ISO 8601, UTC

    @property
    def patches(self) -> dict[str, list]:
        return {p.path: list(p.patch) for p in self.patched}

    def to_json(self) -> dict:
        return {
            "schema": MANIFEST_SCHEMA,
            "original": self.original,
            "servepilot_version": self.servepilot_version,
            "created": self.created,
            "patches_hash": self.patches_hash,
            "patched": [
                {
                    "path": p.path,
                    "patch": list(p.patch),
                    "original_sha256": p.original_sha256,
                    "original_size": p.original_size,
                    "overlay_sha256": p.overlay_sha256,
                }
                for p in self.patched
            ],
            "linked": [
                {"path": f.path, "target": f.target, "size": f.size, "mtime_ns": f.mtime_ns}
                for f in self.linked
            ],
            "dirs": list(self.dirs),
        }


def patches_hash(patches: dict[str, list]) -> str:
    """Short, stable name for a set of patches (sorted keys: order of dict entries is noise)."""
    canonical = json.dumps(patches, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def sha256_file(path: Path) -> str:
    """sha256 of a regular file (links followed); OverlayError for anything else.

    Opened non-blocking and checked with fstat before reading: a FIFO put where a JSON file
    was would otherwise block forever, a directory raise IsADirectoryError.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise OverlayError(f"cannot read: {exc.strerror}", path=path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OverlayError("not a regular file", path=path)
    with os.fdopen(fd, "rb") as fh:
        h = hashlib.sha256()
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(overlay_dir: Path) -> Manifest:
    """Load and validate an overlay's manifest; NotAnOverlay when there is none."""
    overlay_dir = Path(overlay_dir)
    if not overlay_dir.is_dir():
        raise OverlayError("not a directory", path=overlay_dir)
    mpath = overlay_dir / MANIFEST_NAME
    if mpath.is_symlink() or not mpath.is_file():
        raise NotAnOverlay(
            f"not a servepilot overlay (no {MANIFEST_NAME})",
            path=overlay_dir,
            hint="servepilot only touches directories it made",
        )
    try:
        data = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: also 4300+ digit integers
        raise OverlayError(f"manifest is unreadable: {str(exc)[:200]}", path=mpath) from None
    return _manifest_from_json(data, mpath)


def _manifest_from_json(data: object, where: Path) -> Manifest:
    def need(obj: object, key: str, kind: type):
        value = obj.get(key) if isinstance(obj, dict) else None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise OverlayError(f"manifest field {key!r} is missing or not {kind.__name__}", path=where)
        return value

    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
        raise OverlayError(f"manifest schema is not {MANIFEST_SCHEMA}", path=where)
    original = need(data, "original", str)
    if not Path(original).is_absolute():
        raise OverlayError("manifest 'original' is not an absolute path", path=where)
    patched = tuple(
        PatchedFile(
            path=safe_relpath(need(p, "path", str), where=where),
            patch=tuple(need(p, "patch", list)),
            original_sha256=need(p, "original_sha256", str),
            original_size=need(p, "original_size", int),
            overlay_sha256=need(p, "overlay_sha256", str),
        )
        for p in need(data, "patched", list)
    )
    linked = tuple(
        LinkedFile(
            path=safe_relpath(need(f, "path", str), where=where),
            target=need(f, "target", str),
            size=need(f, "size", int),
            mtime_ns=need(f, "mtime_ns", int),
        )
        for f in need(data, "linked", list)
    )
    dirs = tuple(safe_relpath(d, where=where) for d in need(data, "dirs", list))
    return Manifest(
        original=original,
        patches_hash=need(data, "patches_hash", str),
        dirs=dirs,
        linked=linked,
        patched=patched,
        servepilot_version=need(data, "servepilot_version", str),
        created=need(data, "created", str),
    )
