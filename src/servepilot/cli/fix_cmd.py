"""`servepilot fix` and `servepilot overlay status|diff|remove`: parse, one library call, render."""

from __future__ import annotations

import click

from servepilot.cli.common import (
    ENGINE_COMMAND_SETTINGS,
    JSON_OPTION,
    build_deployment_from_cli,
    deployment_options,
)

OVERLAY_DIR = click.argument("overlay_dir", type=click.Path(file_okay=False, path_type=str))


@click.command(context_settings={"help_option_names": ["-h", "--help"], **ENGINE_COMMAND_SETTINGS})
@click.option("--remedy", "remedy_number", type=int, metavar="N", help="Apply remedy N (1-based) of the chosen "
                                                                       "finding.")
@click.option("--finding", "finding_code", metavar="CODE", help="Fix this finding instead of the first error.")
@click.option("--write", "write_path", type=click.Path(dir_okay=False), help="Save the new command as a shell script.")
@click.option("--dest", type=click.Path(file_okay=False), help="Where to build an overlay (default: beside the "
                                                               "original).")
@click.option("--replace", is_flag=True, help="Rebuild an older servepilot overlay at the destination.")
@click.option("--dry-run", is_flag=True, help="Show the chosen remedy and new command; build and write nothing.")
@deployment_options
@JSON_OPTION
def fix(remedy_number, finding_code, write_path, dest, replace, dry_run, gpu, engine_version, command_file, command,
        as_json):
    """Apply a remedy of `check`: a changed command, or a checkpoint overlay (never edits the original).

    Without --remedy, the first remedy of the first error that servepilot can apply is used.
    The new command is checked again; exit 1 when that check still predicts a failure.

    \b
    Examples:
      servepilot fix --gpu rtx-pro-6000x8 -- vllm serve /models/kimi -tp 8
      servepilot fix --dry-run --finding SP-ATTN-001 -- vllm serve /models/kimi -tp 8
      servepilot fix --remedy 2 --write serve.sh -- vllm serve /models/kimi -tp 8
    """
    from servepilot.checks import run_checks
    from servepilot.fix import check_script_path, plan_fix, write_script
    from servepilot.runs.store import measurement_for

    if write_path:
        check_script_path(write_path)  # before anything is built: a bad --write changes nothing
    dep = build_deployment_from_cli(command, gpu, engine_version, command_file)
    checked = run_checks(dep, measured=measurement_for(dep))
    plan = plan_fix(
        dep,
        checked.findings,
        remedy_number=remedy_number,
        finding_code=finding_code,
        dest=dest,
        replace=replace,
        gpu=gpu,
        engine_version=engine_version,
    )
    if plan.chosen is None:
        _render_no_choice(plan, as_json)
        return 1 if plan.has_errors else 0
    result = None if dry_run else plan.execute(measurement_for)
    written = None
    if result is not None and write_path:
        note = f"{plan.chosen.finding} remedy {plan.chosen.number} ({plan.chosen.change})"
        written = str(write_script(write_path, result.new_command, note=note))
    payload = plan.to_json(result, written=written, dry_run=dry_run)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(plan.JSON_SCHEMA, payload)
    else:
        _render_fix(plan, payload)
    return 1 if payload["new_verdict"] == "fail" else 0


def _render_fix(plan, payload: dict) -> None:
    c = plan.chosen
    click.echo(f"{c.finding} ({c.severity}): {c.title}")
    click.echo(f"remedy {c.number} [{c.kind}]: {c.change}")
    if c.tradeoff:
        click.echo(f"  trade-off: {c.tradeoff}")
    if payload["overlay"]:
        o = payload["overlay"]
        verb = {"create": "built", "replace": "rebuilt", "reuse": "reused"}[o["action"]]
        if not o["built"]:
            verb = f"would be {verb}"
        click.echo(f"overlay {verb}: {o['path']}")
        click.echo(f"  {o['link_count']} files linked to {o['original']}; patched: {', '.join(o['patched'])}")
        for path in o["leftovers"]:
            click.echo(f"  left by an interrupted build (delete it when no fix is running): {path}")
    if payload["pip_command"]:
        click.echo(f"upgrade first: {payload['pip_command']}")
        same = payload["new_command"] == payload["old_command"]
        click.echo("command (unchanged):" if same else "command for the new release:")
    else:
        click.echo("new command:")
    click.echo(f"  {payload['new_command']}")
    if payload["dry_run"]:
        for patched in plan.overlay.patched if plan.overlay else ():
            click.echo(patched.unified_diff().rstrip("\n"))
        click.echo("dry run: nothing built, nothing written")
        return
    if payload["new_verdict"] is not None:
        resolved = payload["new_resolved"]
        engine_picks = ", ".join(
            f"{key} {resolved[key]}" for key in ("attention_backend", "kv_cache_storage") if resolved.get(key)
        )
        on = (f" on {resolved['engine']} {resolved['engine_version']}"
              if payload["pip_command"] and resolved.get("engine_version") else "")
        click.echo(f"check of the new command{on}: {payload['new_verdict']}"
                   + (f" ({engine_picks})" if engine_picks else ""))
        for f in payload["new_findings"]:
            click.echo(f"  {f['severity']:<7} {f['code']}: {f['title']}")
    else:
        click.echo("check again after the upgrade: servepilot check -- <command>")
    if payload["written"]:
        click.echo(f"wrote {payload['written']}")


def _render_no_choice(plan, as_json: bool) -> None:
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(plan.JSON_SCHEMA, plan.to_json(None, written=None, dry_run=False))  # every key None or empty
        return
    if not plan.has_errors:
        click.echo("nothing to fix: the check found no errors")
        if not plan.options:
            return
    else:
        click.echo("no remedy servepilot can apply; the options:")
    for o in plan.options:
        state = "" if o.applicable else f"  (not applicable: {o.why_not})"
        click.echo(f"  {o.finding} ({o.severity}) remedy {o.number} [{o.kind}]: {o.change}{state}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def overlay():
    """Status, diff or removal of a servepilot overlay directory.

    An overlay is what `fix` builds beside a checkpoint: patched JSON copies, links to
    everything else, and a manifest. Directories without that manifest are refused.

    \b
    Examples:
      servepilot overlay status /models/kimi-servepilot-69d8b8fb2e
      servepilot overlay diff /models/kimi-servepilot-69d8b8fb2e
      servepilot overlay remove --dry-run /models/kimi-servepilot-69d8b8fb2e
    """


@overlay.command("status", short_help="Has the original changed since the overlay was built? (exit 1 on drift)")
@OVERLAY_DIR
@JSON_OPTION
def overlay_status_cmd(overlay_dir: str, as_json: bool):
    """Check that the original has not changed since the overlay was built (exit 1 on drift).

    \b
    Example:
      servepilot overlay status /models/kimi-servepilot-69d8b8fb2e
    """
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


@overlay.command("diff", short_help="The overlay's JSON patches and unified diffs.")
@OVERLAY_DIR
@JSON_OPTION
def overlay_diff_cmd(overlay_dir: str, as_json: bool):
    """Show an overlay's RFC 6902 patches and the unified diff of each patched file.

    \b
    Example:
      servepilot overlay diff /models/kimi-servepilot-69d8b8fb2e
    """
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


@overlay.command("remove", short_help="Remove what servepilot made; keep anything else.")
@OVERLAY_DIR
@click.option("--dry-run", is_flag=True, help="Show what would be removed and kept; remove nothing.")
@JSON_OPTION
def overlay_remove_cmd(overlay_dir: str, dry_run: bool, as_json: bool):
    """Remove what servepilot made in an overlay; keep (and name) anything else.

    The original checkpoint is never touched: only the links, patched copies and manifest
    that the overlay's manifest lists are removed.

    \b
    Example:
      servepilot overlay remove --dry-run /models/kimi-servepilot-69d8b8fb2e
    """
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
