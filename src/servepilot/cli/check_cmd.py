"""`servepilot check -- CMD` and `servepilot explain CODE`: parse, one library call, render."""

from __future__ import annotations

import click

from servepilot.cli.common import JSON_OPTION, build_deployment_from_cli, deployment_options

CHECK_SCHEMA = "servepilot.check/1"
EXPLAIN_SCHEMA = "servepilot.explain/1"
_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}
_VERDICT_STYLE = {"fail": "red", "warn": "yellow", "pass": "green"}


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@deployment_options
@JSON_OPTION
def check(command, gpu, engine_version, command_file, as_json):
    """Predict what the engine will do with CMD and whether the launch will fail.

    \b
    Exit codes: 0 pass or warn, 1 the launch will fail, 2 bad input.
    Example:
      servepilot check --gpu rtx-pro-6000x8 --engine-version 0.16.0 -- \\
        vllm serve /models/kimi-k2.5-nvfp4 -tp 8 --trust-remote-code
    """
    from servepilot.checks import run_checks

    dep = build_deployment_from_cli(command, gpu, engine_version, command_file)
    result = run_checks(dep)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(CHECK_SCHEMA, payload(result))
    else:
        render(result)
    return 1 if result.verdict == "fail" else 0


def payload(result) -> dict:
    """The JSON object of docs/json/check.md, without the schema key."""
    return {
        "verdict": result.verdict,
        "findings": list(result.findings),
        "resolved": result.resolved,
        "plan": result.plan,
        "notes": list(result.notes),
    }


def render(result) -> None:
    echo = click.echo
    counts = {s: sum(1 for f in result.findings if f.severity == s) for s in ("error", "warning", "info")}
    echo(click.style(f"verdict: {result.verdict.upper()}", fg=_VERDICT_STYLE[result.verdict], bold=True)
         + f"  ({counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s))")
    for f in result.findings:
        echo("")
        echo(click.style(f"[{f.severity}] {f.code} {f.category}: {f.title}", fg=_SEVERITY_STYLE[f.severity], bold=True))
        for line in f.detail.splitlines():
            echo(f"    {line}")
        if f.evidence:
            echo("  evidence:")
            for e in f.evidence:
                echo(f"    - {e.fact}  [{e.source}]")
        if f.remedies:
            echo("  remedies (best first):")
            for i, r in enumerate(f.remedies, 1):
                echo(f"    {i}. ({r.kind}) {r.change}")
                echo(f"       trade-off: {r.tradeoff}")
    echo("")
    echo(click.style("resolved:", bold=True))
    for key, value in result.resolved.items():
        if key == "candidates":
            continue
        if value is not None:
            echo(f"  {key}: {value}")
    if result.plan:
        echo(click.style("plan:", bold=True))
        for key, value in result.plan.items():
            if isinstance(value, (str, int, float, bool)):
                echo(f"  {key}: {value}")
    for note in result.notes:
        echo(click.style(f"note: {note}", dim=True))


@click.command()
@click.argument("code")
@click.option("--engine-version", metavar="VERSION", help="Also list the knowledge rows that hold for this engine version.")
@JSON_OPTION
def explain(code, engine_version, as_json):
    """Show the facts behind rule CODE (e.g. SP-ATTN-001) and where they were read."""
    from servepilot.checks.registry import find_rule, load_rules
    from servepilot.errors import BadInput

    r = find_rule(code)
    if r is None:
        known = ", ".join(sorted({x.code for x in load_rules()}))
        raise BadInput(f"no rule {code!r}", hint=f"known codes: {known}")
    info = {
        "code": r.code,
        "category": r.category,
        "title": r.title,
        "engines": list(r.engines) or ["all"],
        "facts": list(r.facts),
        "sources": list(r.sources),
        "module": r.module,
    }
    if engine_version:
        from servepilot.checks.registry import knowledge_rows

        info["engine_version"] = engine_version
        info["knowledge"] = knowledge_rows(r, engine_version)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(EXPLAIN_SCHEMA, info)
        return 0
    click.echo(click.style(f"{r.code} ({r.category}): {r.title}", bold=True))
    click.echo(f"engines: {', '.join(info['engines'])}")
    click.echo("facts:")
    for fact in r.facts:
        click.echo(f"  - {fact}")
    click.echo("sources:")
    for source in r.sources:
        click.echo(f"  - {source}")
    if engine_version:
        click.echo(f"knowledge rows for {engine_version}:")
        for row in info["knowledge"]:
            facts = ", ".join(f"{k}={v}" for k, v in row["facts"].items())
            click.echo(f"  - {row['file']}:{row['path']}: {facts}  [{row['source']}]")
    return 0
