"""`servepilot triage LOG LOG...`: several nodes' logs (or one with Ray's ip= prefixes)."""

from __future__ import annotations

import click

SCHEMA = "servepilot.triage-nodes/1"


def is_multinode_logs(logs) -> bool:
    if len(logs) > 1:
        return True
    import os

    if not os.path.isfile(logs[0]):
        return False
    from servepilot.triage.multinode import ray_nodes_in

    return len(ray_nodes_in(logs[0])) > 1


def triage_nodes_cli(logs: list[str], as_json: bool) -> int:
    from servepilot.triage.multinode import triage_nodes

    t = triage_nodes(logs)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(SCHEMA, {"nodes": list(t.nodes), "lines_read": t.lines_read, "root_cause": t.root_cause,
                           "other_errors": list(t.other), "merged_tail": list(t.merged_tail)})
        return 1 if t.root_cause else 0
    click.echo(f"{len(t.nodes)} node(s): {', '.join(t.nodes)} · {t.lines_read:,} lines merged by time")
    rc = t.root_cause
    if rc is None:
        click.echo(click.style("no multi-node failure found", fg="green"))
        return 0
    click.echo(click.style(f"root cause: {rc.failure_class} ({rc.category}) on {rc.node}", fg="red", bold=True)
               + f"  (line {rc.line})")
    click.echo(f"  │ {rc.excerpt}")
    click.echo(rc.explanation)
    click.echo(f"fix: {rc.fix}  [{rc.source}]")
    for d in t.other:
        click.echo(f"  also: {d.failure_class} on {d.node}, line {d.line}: {d.excerpt[:120]}")
    return 1
