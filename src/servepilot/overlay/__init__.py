"""Patched checkpoint views: symlinks to the original, patched JSON copies, a manifest.

Never writes into the original. Plan first (`plan_overlay`), then `OverlayPlan.execute()`.
"""

from servepilot.overlay.build import OverlayPlan, PatchedOutput, plan_overlay
from servepilot.overlay.diff import FileDiff, OverlayDiff, overlay_diff
from servepilot.overlay.errors import NotAnOverlay, OverlayError, PathEscape
from servepilot.overlay.manifest import Manifest, read_manifest
from servepilot.overlay.paths import MANIFEST_NAME
from servepilot.overlay.remove import RemovalPlan, RemovalResult, plan_removal
from servepilot.overlay.status import Drift, OverlayStatus, overlay_status

__all__ = [
    "MANIFEST_NAME",
    "Drift",
    "FileDiff",
    "Manifest",
    "NotAnOverlay",
    "OverlayDiff",
    "OverlayError",
    "OverlayPlan",
    "OverlayStatus",
    "PatchedOutput",
    "PathEscape",
    "RemovalPlan",
    "RemovalResult",
    "overlay_diff",
    "overlay_status",
    "plan_overlay",
    "plan_removal",
    "read_manifest",
]
