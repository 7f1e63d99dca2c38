"""Overlay errors: typed, carrying the path, so the CLI prints one line (exit 2)."""

from __future__ import annotations

from servepilot.errors import BadInput


class OverlayError(BadInput):
    """An overlay that cannot be planned, built, checked or removed as asked."""


class PathEscape(OverlayError):
    """A path (patch target, symlink, manifest entry) that would leave the checkpoint."""


class NotAnOverlay(OverlayError):
    """A directory without servepilot's manifest: servepilot did not make it, so it keeps off."""
