"""`servepilot fix` and `servepilot overlay status|diff|remove`: parse, one library call, render."""

from __future__ import annotations

import click

from servepilot.cli.common import JSON_OPTION

OVERLAY_DIR = click.argument("overlay_dir", type=click.Path(file_okay=False, path_type=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def overlay():
    """Status, diff or removal of a servepilot overlay directory."""


@overlay.command("status")
@OVERLAY_DIR
@JSON_OPTION
def overlay_status_cmd(overlay_dir: str, as_json: bool):
    """Check that the original has not changed since the overlay was built (exit 1 on drift)."""
    from servepilot.overlay import overlay_status

    status = overlay_status(overlay_dir)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json("servepilot.overlay-status/1", _as_dict(status))
    else:
        state = "clean" if status.clean else f"DRIFT in {len(status.drift)} file(s)"
        click.echo(f"overlay {status.overlay}")
        click.echo(f"  original {status.original}")
        click.echo(f"  built {status.created} by servepilot {status.servepilot_version}")
        click.echo(f"  {status.files_checked} files checked: {state}")
        for d in status.drift:
            click.echo(f"  {d.side:<8} {d.change:<8} {d.path}: {d.detail}")
    return 0 if status.clean else 1


@overlay.command("diff")
@OVERLAY_DIR
@JSON_OPTION
def overlay_diff_cmd(overlay_dir: str, as_json: bool):
    """Show an overlay's RFC 6902 patches and the unified diff of each patched file."""
    import json

    from servepilot.overlay import overlay_diff

    diff = overlay_diff(overlay_dir)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json("servepilot.overlay-diff/1", _as_dict(diff))
        return 0
    click.echo(f"overlay {diff.overlay} of {diff.original}")
    for f in diff.files:
        click.echo(f"\n{f.path}: {json.dumps(list(f.patch))}")
        click.echo(f.unified.rstrip("\n") if f.unified else f"  ({f.note})")
    return 0


@overlay.command("remove")
@OVERLAY_DIR
@click.option("--dry-run", is_flag=True, help="Show what would be removed and kept; remove nothing.")
@JSON_OPTION
def overlay_remove_cmd(overlay_dir: str, dry_run: bool, as_json: bool):
    """Remove what servepilot made in an overlay; keep (and name) anything else."""
    from servepilot.overlay import plan_removal

    plan = plan_removal(overlay_dir)
    if dry_run:
        payload = {
            "overlay": str(plan.overlay),
            "dry_run": True,
            "removed": len(plan.links) + len(plan.files) + 1,
            "kept": list(plan.foreign),
            "directory_removed": False,
        }
    else:
        result = plan.execute()
        payload = {
            "overlay": result.overlay,
            "dry_run": False,
            "removed": result.removed,
            "kept": list(result.kept),
            "directory_removed": result.directory_removed,
        }
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json("servepilot.overlay-remove/1", payload)
        return 0
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {payload['removed']} entries servepilot made in {payload['overlay']}")
    if payload["kept"]:
        click.echo(f"kept {len(payload['kept'])} file(s) servepilot did not write (or that were edited):")
        for rel in payload["kept"]:
            click.echo(f"  {rel}")
    if not dry_run and not payload["directory_removed"]:
        click.echo("the directory itself stays because it is not empty")
    return 0


def _as_dict(obj) -> dict:
    from servepilot.jsonable import to_jsonable

    return to_jsonable(obj)
