"""`overlay remove`: delete only what servepilot made, leave everything else and say so.

Removed: symlinks the manifest lists (still pointing where servepilot pointed them), patched
files whose content is still what servepilot wrote, the manifest, then the directories it
created if they are empty. Never follows a symlink, never calls rmtree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from servepilot.overlay.errors import OverlayError
from servepilot.overlay.manifest import read_manifest, sha256_file
from servepilot.overlay.paths import MANIFEST_NAME, is_within


@dataclass(frozen=True)
class RemovalResult:
    overlay: str
    removed: int
    kept: tuple[str, ...]  # foreign or edited files left in place
    directory_removed: bool


@dataclass(frozen=True)
class RemovalPlan:
    overlay: Path
    links: tuple[str, ...]
    files: tuple[str, ...]  # patched files, unchanged since servepilot wrote them
    dirs: tuple[str, ...]  # deepest first; removed only when empty
    foreign: tuple[str, ...]  # not servepilot's, or edited since: kept

    def execute(self) -> RemovalResult:
        removed = 0
        for rel in self.links + self.files + (MANIFEST_NAME,):
            os.unlink(self.overlay / rel)
            removed += 1
        for rel in self.dirs:
            try:
                os.rmdir(self.overlay / rel)
            except OSError:
                pass  # holds a foreign file: stays, and `foreign` already names it
        try:
            os.rmdir(self.overlay)
            gone = True
        except OSError:
            gone = False
        return RemovalResult(str(self.overlay), removed, self.foreign, gone)


def plan_removal(overlay_dir: Path) -> RemovalPlan:
    """Sort the overlay's entries into servepilot's (to remove) and foreign (to keep)."""
    overlay = Path(os.path.abspath(overlay_dir))
    if overlay.is_symlink():
        raise OverlayError("is a symlink; give the overlay directory itself", path=overlay)
    manifest = read_manifest(overlay)
    if is_within(overlay.resolve(), Path(manifest.original).resolve()):
        raise OverlayError("lies inside the original checkpoint named in its manifest; refusing", path=overlay)
    link_targets = {f.path: f.target for f in manifest.linked}
    written = {p.path: p.overlay_sha256 for p in manifest.patched}
    links: list[str] = []
    files: list[str] = []
    foreign: list[str] = []
    for here, dirnames, filenames in os.walk(overlay, followlinks=False):
        for name in sorted(filenames) + sorted(d for d in dirnames if os.path.islink(os.path.join(here, d))):
            full = Path(here, name)
            rel = full.relative_to(overlay).as_posix()
            if rel == MANIFEST_NAME:
                continue
            if rel in link_targets and full.is_symlink() and os.readlink(full) == link_targets[rel]:
                links.append(rel)
            elif rel in written and not full.is_symlink() and sha256_file(full) == written[rel]:
                files.append(rel)
            else:
                foreign.append(rel)
    dirs = tuple(sorted(manifest.dirs, key=lambda d: d.count("/"), reverse=True))
    return RemovalPlan(overlay, tuple(links), tuple(files), dirs, tuple(sorted(foreign)))
