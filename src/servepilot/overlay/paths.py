"""Walking an original checkpoint safely: relative paths only, no escapes, HF blobs allowed.

A Hugging Face cache snapshot (`models--org--name/snapshots/<rev>/`) holds symlinks into
`../../blobs/<hash>`: those point outside the snapshot directory but are the cache's own
layout, so they are the one kind of outside link an original may have.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from servepilot.overlay.errors import OverlayError, PathEscape

MANIFEST_NAME = ".servepilot-overlay.json"


def safe_relpath(rel: object, *, where: str | Path) -> str:
    """`rel` as a normalized relative POSIX path inside a directory, or PathEscape."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise PathEscape(f"path {rel!r} is not a usable relative path", path=where)
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise PathEscape(f"path {rel!r} is absolute; only paths inside the checkpoint are allowed", path=where)
    if ".." in pure.parts:
        raise PathEscape(f"path {rel!r} leaves the checkpoint through '..'", path=where)
    if not pure.parts or str(pure) == ".":
        raise PathEscape(f"path {rel!r} names the checkpoint directory itself, not a file", path=where)
    return str(pure)


def is_within(child: Path, parent: Path) -> bool:
    """True when the (already resolved) `child` is `parent` or below it."""
    return child == parent or parent in child.parents


def hf_blobs_dir(root: Path) -> Path | None:
    """The resolved `blobs/` of a HF cache repo when `root` is one of its snapshots, else None."""
    snapshots = root.parent
    if snapshots.name != "snapshots":
        return None
    blobs = snapshots.parent / "blobs"
    return blobs.resolve() if blobs.is_dir() else None


@dataclass(frozen=True)
class OriginalFile:
    """One file of the original, as the overlay will see it."""

    rel: str  # path inside the checkpoint, POSIX form
    path: Path  # root / rel, unresolved (the symlink itself for HF snapshots)
    size: int  # of the file the path resolves to
    mtime_ns: int


@dataclass(frozen=True)
class OriginalTree:
    """Every directory and file of an original checkpoint, validated."""

    root: Path  # absolute, not resolved: the path the operator gave
    dirs: tuple[str, ...]  # sub-directories, parents before children
    files: tuple[OriginalFile, ...]
    hf_snapshot: bool = False

    def file(self, rel: str) -> OriginalFile | None:
        for f in self.files:
            if f.rel == rel:
                return f
        return None


def walk_original(root: Path) -> OriginalTree:
    """List the original's files; refuse what an overlay cannot mirror safely.

    Refused: symlinks that resolve outside the checkpoint (other than into a HF cache's
    blobs), dangling symlinks, directory symlinks, sockets/FIFOs/devices, and a directory
    that is itself a servepilot overlay (its files point outside it by design).
    """
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise OverlayError("not a checkpoint directory", path=root)
    if (root / MANIFEST_NAME).exists():
        raise OverlayError(
            "this directory is itself a servepilot overlay",
            path=root,
            hint="fix the original it was made from (see `servepilot overlay status`)",
        )
    root_real = root.resolve()
    blobs = hf_blobs_dir(root)
    dirs: list[str] = []
    files: list[OriginalFile] = []
    for here, dirnames, filenames in os.walk(root, followlinks=False):
        here_path = Path(here)
        dirnames.sort()
        for name in dirnames:
            full = here_path / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                raise OverlayError(
                    "directory symlinks inside a checkpoint are not mirrored by overlays",
                    path=full,
                )
            dirs.append(rel)
        for name in sorted(filenames):
            full = here_path / name
            rel = full.relative_to(root).as_posix()
            files.append(_original_file(full, rel, root_real, blobs))
    return OriginalTree(root=root, dirs=tuple(dirs), files=tuple(files), hf_snapshot=blobs is not None)


def _original_file(full: Path, rel: str, root_real: Path, blobs: Path | None) -> OriginalFile:
    if full.is_symlink():
        target = Path(os.path.realpath(full))
        if not target.exists():
            raise OverlayError(f"symlink points at {os.readlink(full)!r}, which does not exist", path=full)
        inside = is_within(target, root_real) or (blobs is not None and is_within(target, blobs))
        if not inside:
            raise PathEscape(
                f"symlink resolves to {target}, outside the checkpoint",
                path=full,
                hint="only Hugging Face cache snapshots may link outside (into their blobs/)",
            )
    st = full.stat()  # follows the link: the size and time of the data the engine reads
    if not stat.S_ISREG(st.st_mode):
        raise OverlayError("not a regular file (socket, FIFO or device)", path=full)
    return OriginalFile(rel=rel, path=full, size=st.st_size, mtime_ns=st.st_mtime_ns)
