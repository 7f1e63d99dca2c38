"""`servepilot triage LOG`: an engine log to its root cause, explanation and fixes."""

from __future__ import annotations

import click

from servepilot.cli.common import JSON_OPTION

SCHEMA = "servepilot.triage/1"


@click.command("triage")
@click.argument("logs", metavar="LOG...", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str))
@click.option(
    "--engine",
    type=click.Choice(["vllm", "sglang", "llama.cpp"]),
    help="The engine that wrote the log (default: guessed from its first megabyte).",
)
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]),
    help="Lines stamped before this time belong to an earlier run: ignore them (and say so).",
)
@JSON_OPTION
def triage(logs, engine, since, as_json):
    """Find the root cause in an engine LOG (vLLM, SGLang, llama.cpp; any size).

    Exit 1 when a root cause is found, 0 for a healthy start or no error, 2 when the log
    cannot be read or is not text. A log that holds several launches is flagged stale and
    only the last launch is diagnosed.

    \b
    Examples:
      servepilot triage /tmp/vllm_kimi.log
      servepilot triage --since "2026-02-10 12:09:00" /tmp/vllm_kimi.log   # ignore older lines
      servepilot triage --engine sglang --json server.log
      servepilot triage node0.log node1.log   # several nodes: merged by time
    """
    from servepilot.cli.triage_nodes_view import is_multinode_logs

    if is_multinode_logs(logs):  # several nodes' logs, or one with Ray's ip= prefixes
        from servepilot.cli.triage_nodes_view import triage_nodes_cli

        return triage_nodes_cli(list(logs), as_json)
    log = logs[0]
    from servepilot.triage import triage_file

    diagnosis = triage_file(log, engine=engine, since=since, guess_sole_line=True)  # the user's own file
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(SCHEMA, _payload(diagnosis))
    else:
        _render(diagnosis, log)
    return 1 if diagnosis.root_cause is not None else 0


def _payload(d) -> dict:
    return {
        "root_cause": d.root_cause,
        "remedies": d.remedies,
        "other_errors": d.other_errors,
        "stale": d.stale,
        "stale_reason": d.stale_reason,
        "healthy": d.healthy,
        "launches": d.launches,
        "notes": d.notes,
        "alternatives": d.alternatives,
        "engine": d.engine,
        "lines_read": d.lines_read,
    }


def _render(d, log: str) -> None:
    from rich.markup import escape

    from servepilot.cli.output import console

    out = console()
    if d.stale:
        out.print(f"[bold yellow]stale log:[/] {escape(d.stale_reason)}")
    rc = d.root_cause
    if rc is None:
        state = "healthy start" if d.healthy else "no error found"
        out.print(f"[bold green]{state}[/] in {escape(log)} ({d.lines_read:,} line{'' if d.lines_read == 1 else 's'}, "
                  f"engine {d.engine or 'unknown'})")
    else:
        count = f" x{rc.count}" if rc.count > 1 else ""
        who = f" in {', '.join(rc.processes)}" if rc.processes else (f" in {rc.process}" if rc.process else "")
        out.print(
            f"[bold red]root cause:[/] [bold]{rc.category}[/]{count}{escape(who)}  "
            f"(line {rc.line}, {rc.signature or 'unknown error'}, confidence {rc.confidence:.2f})"
        )
        for line in rc.excerpt.splitlines():
            out.print(f"  [dim]│[/] {escape(line)}")
        out.print(f"\n{escape(rc.explanation)}")
        if d.remedies:
            out.print("\n[bold]fixes[/] (best first):")
            for i, r in enumerate(d.remedies, 1):
                check = f" [dim]({r.check})[/]" if r.check else ""
                out.print(f"  {i}. {escape(f'[{r.kind}]')} {escape(r.change)}{check}")
                out.print(f"     [dim]trade-off: {escape(r.tradeoff)}[/]")
    if d.alternatives:
        out.print("\n[bold]other readings[/] (less likely):")
        for a in d.alternatives:
            out.print(f"  {a.category} (confidence {a.confidence:.2f}, line {a.line}): {escape(a.explanation[:200])}")
    if d.other_errors:
        out.print("\n[bold]other errors[/]:")
        for e in d.other_errors:
            count = f" x{e.count}" if e.count > 1 else ""
            old = " [dim](earlier launch)[/]" if e.launch != d.launches - 1 else ""
            out.print(f"  line {e.line}: {e.category}{count} {escape(e.message[:160])}{old}")
    for n in d.notes:
        out.print(f"[dim]note (not a failure), line {n.line}: {escape(n.message[:160])}[/]")
