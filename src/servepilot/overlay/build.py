"""Plan, then build, an overlay: symlinks to the original's files, patched JSON copies, a manifest.

`plan_overlay` reads only (the original's tree, the JSON files it patches) and checks every
patch applies; `OverlayPlan.execute()` builds the directory under a hidden temporary name
beside the destination and renames it into place last, so a build killed at any point
leaves nothing under the final name (rename(2) within one filesystem is atomic).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from servepilot.errors import CheckpointError
from servepilot.overlay.errors import NotAnOverlay, OverlayError, PathEscape
from servepilot.overlay.jsonstyle import detect_style
from servepilot.overlay.manifest import (
    LinkedFile,
    Manifest,
    PatchedFile,
    patches_hash,
    read_manifest,
    sha256_file,
)
from servepilot.overlay.paths import (
    MANIFEST_NAME,
    OriginalTree,
    is_within,
    safe_relpath,
    walk_original,
)


@dataclass(frozen=True)
class PatchedOutput:
    """A patched file as it will be written."""

    path: str
    patch: tuple
    original_sha256: str
    original_size: int
    overlay_sha256: str
    original_text: str = field(repr=False, metadata={"json": False})
    text: str = field(repr=False, metadata={"json": False})

    def unified_diff(self) -> str:
        import difflib

        return "".join(
            difflib.unified_diff(
                self.original_text.splitlines(keepends=True),
                self.text.splitlines(keepends=True),
                fromfile=f"original/{self.path}",
                tofile=f"overlay/{self.path}",
            )
        )


@dataclass(frozen=True)
class OverlayPlan:
    """What `execute()` will do; nothing has been written yet."""

    original: Path
    dest: Path
    placement: str  # "given" | "sibling" | "state-dir"
    action: str  # "create" | "replace" (an older overlay of ours) | "reuse" (identical, clean)
    patches_hash: str
    dirs: tuple[str, ...]
    links: tuple[LinkedFile, ...] = field(metadata={"json": False})
    patched: tuple[PatchedOutput, ...]
    hf_snapshot: bool = False
    # hidden directories left by interrupted builds of this overlay (no manifest: servepilot
    # never deletes them on its own, another build may be running); named so the operator can
    leftovers: tuple[str, ...] = ()
    link_count: int = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "link_count", len(self.links))

    @property
    def summary_str(self) -> str:
        files = ", ".join(p.path for p in self.patched)
        return f"{self.action} overlay {self.dest}: {self.link_count} links, patched {files}"

    def execute(self) -> Path:
        """Build the overlay and return its path; the original is only ever read."""
        if self.action == "reuse":
            return self.dest
        self._recheck_original()
        parent = self.dest.parent
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.dest.name}.partial-", dir=parent))
        try:
            os.chmod(tmp, 0o755)  # mkdtemp makes 0700; engines may run as another user
            self._populate(tmp)
            self._move_into_place(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # rmtree unlinks symlinks, never follows them
            raise
        return self.dest

    def _recheck_original(self) -> None:
        for p in self.patched:
            now = sha256_file(self.original / p.path)
            if now != p.original_sha256:
                raise OverlayError("changed between planning and building the overlay", path=self.original / p.path)

    def _populate(self, tmp: Path) -> None:
        for rel in self.dirs:
            (tmp / rel).mkdir()
        for link in self.links:
            os.symlink(link.target, tmp / link.path)
        for p in self.patched:
            with open(tmp / p.path, "x", encoding="utf-8", newline="") as fh:
                fh.write(p.text)
        manifest = Manifest(
            original=str(self.original),
            patches_hash=self.patches_hash,
            dirs=self.dirs,
            linked=self.links,
            patched=tuple(
                PatchedFile(p.path, p.patch, p.original_sha256, p.original_size, p.overlay_sha256)
                for p in self.patched
            ),
            servepilot_version=_version(),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        # written last: a directory with a manifest is a complete overlay
        with open(tmp / MANIFEST_NAME, "x", encoding="utf-8") as fh:
            json.dump(manifest.to_json(), fh, indent=2)
            fh.write("\n")

    def _move_into_place(self, tmp: Path) -> None:
        if self.action == "replace":
            from servepilot.overlay.remove import plan_removal

            # rename(2) may replace an empty directory, so the old overlay goes to a fresh one
            old = Path(tempfile.mkdtemp(prefix=f".{self.dest.name}.old-", dir=self.dest.parent))
            os.rename(self.dest, old)
            os.rename(tmp, self.dest)
            plan_removal(old).execute()
            return
        if os.path.lexists(self.dest):
            raise OverlayError("appeared while the overlay was being built; not overwriting it", path=self.dest)
        os.rename(tmp, self.dest)


def plan_overlay(
    original: Path | str,
    patches: dict[str, list],
    dest: Path | str | None = None,
    *,
    replace: bool = False,
) -> OverlayPlan:
    """Check that every patch applies to `original` and decide where the overlay goes.

    `patches` maps a path inside the checkpoint ("config.json") to RFC 6902 operations.
    Default destination: `<original>-servepilot-<hash>` beside the original when its parent
    is writable and it is not a Hugging Face cache snapshot (a sibling there would look like
    another revision to huggingface_hub), else `<state dir>/overlays/`.
    """
    tree = walk_original(Path(original))
    if not isinstance(patches, dict) or not patches:
        raise OverlayError("no patches given: an overlay needs at least one file to change", path=tree.root)
    normalized: dict[str, list] = {}
    for rel, ops in patches.items():
        safe = safe_relpath(rel, where=tree.root)
        if safe == MANIFEST_NAME:
            raise OverlayError(f"{MANIFEST_NAME} is servepilot's own file and cannot be patched", path=tree.root)
        if not isinstance(ops, list) or not ops:
            raise OverlayError(f"patch for {safe} is not a non-empty list of RFC 6902 operations", path=tree.root)
        normalized[safe] = ops
    patched = tuple(_patch_file(tree, rel, ops) for rel, ops in sorted(normalized.items()))
    phash = patches_hash(normalized)
    dest_path, placement = _choose_dest(tree, phash, dest)
    action = _dest_action(dest_path, tree.root, phash, replace)
    patched_rels = {p.path for p in patched}
    links = tuple(
        LinkedFile(path=f.rel, target=relative_target(f.path, dest_path / f.rel), size=f.size, mtime_ns=f.mtime_ns)
        for f in tree.files
        if f.rel not in patched_rels
    )
    return OverlayPlan(
        original=tree.root,
        dest=dest_path,
        placement=placement,
        action=action,
        patches_hash=phash,
        dirs=tree.dirs,
        links=links,
        patched=patched,
        hf_snapshot=tree.hf_snapshot,
        leftovers=_leftovers(dest_path),
    )


def _leftovers(dest: Path) -> tuple[str, ...]:
    prefixes = (f".{dest.name}.partial-", f".{dest.name}.old-")
    try:
        names = os.listdir(dest.parent)
    except OSError:
        return ()
    return tuple(sorted(str(dest.parent / n) for n in names if n.startswith(prefixes)))


def relative_target(original_file: Path, link: Path) -> str:
    """The symlink text from `link` to `original_file`, relative, so an overlay still works
    when the tree holding both is mounted elsewhere (a container's /models).

    Both parents are resolved first: the kernel follows `..` physically, so a relative path
    computed through a symlinked directory would point somewhere else. The original's own
    name stays unresolved (a Hugging Face snapshot's file is itself a link into blobs/).
    """
    source = os.path.realpath(original_file.parent) + os.sep + original_file.name
    return os.path.relpath(source, os.path.realpath(link.parent))


def _patch_file(tree: OriginalTree, rel: str, ops: list) -> PatchedOutput:
    import jsonpatch
    import jsonpointer

    original = tree.file(rel)
    if original is None:
        raise OverlayError(f"patch target {rel} is not a file of the checkpoint", path=tree.root)
    raw = original.path.read_bytes()
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # also 4300+ digit integers and deep nesting
        raise CheckpointError(f"cannot patch: not valid JSON ({str(exc)[:200]})", path=original.path) from None
    try:
        patched = jsonpatch.JsonPatch(ops).apply(doc)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, ValueError, KeyError) as exc:
        raise OverlayError(f"patch does not apply: {exc}", path=original.path) from exc
    if patched == doc:
        raise OverlayError("patch changes nothing in this file", path=original.path)
    out = detect_style(text).dumps(patched)
    return PatchedOutput(
        path=rel,
        patch=tuple(ops),
        original_sha256=hashlib.sha256(raw).hexdigest(),
        original_size=len(raw),
        overlay_sha256=hashlib.sha256(out.encode("utf-8")).hexdigest(),
        original_text=text,
        text=out,
    )


def _choose_dest(tree: OriginalTree, phash: str, dest: Path | str | None) -> tuple[Path, str]:
    root_real = tree.root.resolve()
    if dest is not None:
        path = Path(os.path.abspath(os.path.expanduser(dest)))  # Path.expanduser raises on ~nosuchuser
        if is_within(path.resolve(), root_real):
            raise PathEscape("the overlay cannot live inside the original checkpoint", path=path)
        return path, "given"
    if not tree.hf_snapshot and os.access(tree.root.parent, os.W_OK):
        return tree.root.parent / f"{tree.root.name}-servepilot-{phash}", "sibling"
    from servepilot.settings import state_dir

    # in the shared state dir, the original's path must be part of the name: two checkpoints
    # called "model" with the same patches must not collide
    if tree.hf_snapshot:  # models--org--name/snapshots/<rev> -> org--name-<rev[:8]>
        name = f"{tree.root.parent.parent.name.removeprefix('models--')}-{tree.root.name[:8]}"
    else:
        name = tree.root.name
    where = hashlib.sha256(f"{tree.root}\n{phash}".encode()).hexdigest()[:10]
    return state_dir() / "overlays" / f"{name}-servepilot-{where}", "state-dir"


def _dest_action(dest: Path, original: Path, phash: str, replace: bool) -> str:
    if not os.path.lexists(dest):
        return "create"
    if dest.is_symlink() or not dest.is_dir():
        raise OverlayError("exists and is not a servepilot overlay; not overwriting it", path=dest)
    try:
        existing = read_manifest(dest)
    except NotAnOverlay as exc:
        raise NotAnOverlay(
            "exists and is not a servepilot overlay (no manifest); not overwriting it",
            path=dest,
            hint="choose another --dest",
        ) from exc
    if not replace:
        from servepilot.overlay.status import overlay_status

        if existing.original == str(original) and existing.patches_hash == phash and overlay_status(dest).clean:
            return "reuse"
        raise OverlayError(
            "a different or drifted servepilot overlay is already there",
            path=dest,
            hint="pass --replace to rebuild it, or choose another --dest",
        )
    from servepilot.overlay.remove import plan_removal

    foreign = plan_removal(dest).foreign
    if foreign:
        raise OverlayError(
            f"the existing overlay holds files servepilot did not write ({', '.join(foreign[:3])}); not replacing it",
            path=dest,
        )
    return "replace"


def _version() -> str:
    from servepilot import __version__

    return __version__
