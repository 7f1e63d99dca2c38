"""`overlay remove`: delete only what servepilot made, leave everything else and say so.

Removed: symlinks the manifest lists (still pointing where servepilot pointed them), patched
files whose content is still what servepilot wrote, the manifest, then the directories it
created if they are empty. Never follows a symlink, never calls rmtree.

Execution works relative to directory descriptors opened with O_NOFOLLOW and re-checks
each entry just before unlinking it: between the plan (and its confirmation prompt) and
the unlinks, a sub-directory swapped for a link into the original must not turn
`unlink(overlay/sub/file)` into a deletion in the original.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
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

    link_targets: dict = field(default_factory=dict, metadata={"json": False})
    written: dict = field(default_factory=dict, metadata={"json": False})

    def execute(self) -> RemovalResult:
        removed = 0
        kept = list(self.foreign)
        try:
            root_fd = os.open(self.overlay, _DIR_FLAGS)
        except OSError as exc:
            raise OverlayError(f"cannot open the overlay without following links: {exc.strerror}",
                               path=self.overlay) from exc
        try:
            for rel in self.links + self.files + (MANIFEST_NAME,):
                if self._unlink_if_unchanged(root_fd, rel):
                    removed += 1
                else:
                    kept.append(rel)
            for rel in self.dirs:
                parent, name = _open_parent(root_fd, rel)
                if parent is None:
                    continue
                try:
                    os.rmdir(name, dir_fd=parent)
                except OSError:
                    pass  # holds a foreign file (or is not a directory now): stays
                finally:
                    os.close(parent)
        finally:
            os.close(root_fd)
        try:
            os.rmdir(self.overlay)
            gone = True
        except OSError:
            gone = False
        return RemovalResult(str(self.overlay), removed, tuple(sorted(set(kept))), gone)

    def _unlink_if_unchanged(self, root_fd: int, rel: str) -> bool:
        parent, name = _open_parent(root_fd, rel)
        if parent is None:
            return False  # a directory on the way is gone or is now a link: not ours to follow
        try:
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                return False
            if rel in self.link_targets and rel in self.links:
                if not stat.S_ISLNK(st.st_mode) or os.readlink(name, dir_fd=parent) != self.link_targets[rel]:
                    return False
            elif rel in self.written and rel in self.files:
                if not stat.S_ISREG(st.st_mode) or _sha256_at(parent, name) != self.written[rel]:
                    return False
            elif not stat.S_ISREG(st.st_mode):  # the manifest
                return False
            os.unlink(name, dir_fd=parent)
            return True
        finally:
            os.close(parent)


def processes_using(overlay: Path) -> list[tuple[int, str]]:
    """(pid, command line) of live processes started on the overlay: an argument naming it
    or a path below it. Engines open the weights through its links, so an open file shows
    the original's path, not the overlay's; the command line is where the overlay appears."""
    import psutil

    names = {str(overlay).rstrip("/"), str(overlay.resolve()).rstrip("/")}
    me = os.getpid()
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            argv = p.info["cmdline"] or []
        except psutil.Error:
            continue
        if p.info["pid"] == me:
            continue
        for arg in argv:
            if any(_names_path(arg, n) for n in names):
                found.append((p.info["pid"], " ".join(argv)))
                break
    return found


def _names_path(arg: str, path: str) -> bool:
    """True when `arg` mentions `path` itself or something below it (--model=PATH/x too)."""
    start = arg.find(path)
    while start >= 0:
        end = start + len(path)
        if end == len(arg) or arg[end] in "/\"'":
            return True
        start = arg.find(path, start + 1)
    return False


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _open_parent(root_fd: int, rel: str) -> tuple[int | None, str]:
    """A descriptor of `rel`'s directory, reached without following any link, and its name."""
    *parts, name = rel.split("/")
    fd = os.dup(root_fd)
    for part in parts:
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None, name
        os.close(fd)
        fd = nxt
    return fd, name


def _sha256_at(dir_fd: int, name: str) -> str:
    h = hashlib.sha256()
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)  # a FIFO must not block
    with os.fdopen(fd, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def plan_removal(overlay_dir: Path) -> RemovalPlan:
    """Sort the overlay's entries into servepilot's (to remove) and foreign (to keep)."""
    overlay = Path(os.path.abspath(overlay_dir))
    if overlay.is_symlink():
        raise OverlayError("is a symlink; give the overlay directory itself", path=overlay)
    manifest = read_manifest(overlay)
    if is_within(overlay.resolve(), Path(manifest.original).resolve()):
        raise OverlayError("lies inside the original checkpoint named in its manifest; refusing", path=overlay)
    users = processes_using(overlay)
    if users:
        pid, cmdline = users[0]
        raise OverlayError(
            f"in use by pid {pid} ({cmdline[:120]}){f' and {len(users) - 1} more' if len(users) > 1 else ''}; not "
            "removing it",
            path=overlay,
            hint="stop that process first (`servepilot stop RUN` for a servepilot run)",
        )
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
            elif rel in written and not full.is_symlink() and full.is_file() and sha256_file(full) == written[rel]:
                files.append(rel)
            else:
                foreign.append(rel)
    dirs = tuple(sorted(manifest.dirs, key=lambda d: d.count("/"), reverse=True))
    return RemovalPlan(overlay, tuple(links), tuple(files), dirs, tuple(sorted(foreign)),
                       link_targets=link_targets, written=written)
