"""`servepilot check -- CMD` and `servepilot explain CODE`: parse, one library call, render."""

from __future__ import annotations

import click

from servepilot.cli.common import (
    ENGINE_COMMAND_SETTINGS,
    JSON_OPTION,
    build_deployment_from_cli,
    multinode_options,
)

EXPLAIN_SCHEMA = "servepilot.explain/1"
_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}
_VERDICT_STYLE = {"fail": "red", "warn": "yellow", "pass": "green", "unknown": "magenta"}
EXIT_BY_VERDICT = {"fail": 1, "unknown": 4}


@click.command(context_settings=ENGINE_COMMAND_SETTINGS)
@multinode_options
@click.option("--ask-engine", is_flag=True,
              help="Also ask the installed vLLM itself (its own config building and attention selection in a child "
                   "process: no weights, no GPU memory; the --gpu capability is faked without a GPU). Its answer wins.")
@click.option("--engine-python", metavar="PATH", help="The python of the engine's environment, for --ask-engine.")
@JSON_OPTION
def check(command, gpu, engine_version, command_file, nodes, ray_address, ask_engine, engine_python, as_json):
    """Predict what the engine will do with CMD and whether the launch will fail.

    \b
    Exit codes: 0 pass or warn, 1 the launch will fail, 2 bad input, 4 verdict unknown (a fact
    a rule needs could not be established; each unknown is named with what would settle it).
    Example:
      servepilot check --gpu rtx-pro-6000x8 --engine-version 0.16.0 -- \\
        vllm serve /models/kimi-k2.5-nvfp4 -tp 8 --trust-remote-code
      servepilot check --gpu h200x8 --command-file node0.sh --command-file node1.sh
      servepilot check --gpu h200x8 --nodes 2 -- vllm serve M -tp 8 -pp 2 --distributed-executor-backend ray
    """
    from servepilot.checks import run_checks
    from servepilot.multinode import is_multinode
    from servepilot.runs.store import measurement_for

    if is_multinode(command_file, nodes, ray_address):  # one command per node, or a Ray launch
        from servepilot.cli.multinode_views import check_set

        return check_set(command, command_file, nodes, ray_address, gpu, engine_version, as_json)
    dep = build_deployment_from_cli(command, gpu, engine_version, command_file)
    result = run_checks(dep, measured=measurement_for(dep))
    answer = None
    if ask_engine or engine_python:
        from servepilot.checks import engine_answer

        answer = engine_answer.ask_for(dep, python=engine_python)
        result = engine_answer.with_engine_answer(result, answer)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(result.JSON_SCHEMA, result.to_json() | ({"engine_answer": answer} if answer is not None else {}))
    else:
        render(result)
        if answer is not None:
            from servepilot.checks.engine_answer import answer_lines

            for line in answer_lines(answer):
                click.echo(line)
    return EXIT_BY_VERDICT.get(result.verdict, 0)


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
    for u in result.unknowns:
        echo("")
        echo(click.style(f"[unknown] {u.fact}: {u.why}", fg="magenta", bold=True))
        echo(f"    settle: {u.settle}")
    if result.verdict in ("pass", "warn"):  # a failure needs no caveat about what was not seen
        for u in result.unchecked:
            echo("")
            echo(click.style(f"[not checked before launch] {u.fact}: {u.why}", fg="cyan"))
            echo(f"    settled by: {u.settle}")
    echo("")
    for line in resolved_lines(result.resolved):
        echo(line)
    if result.plan:
        echo(plan_line(result.plan))
    for note in result.notes:
        echo(click.style(f"note: {note}", dim=True))


def resolved_lines(resolved: dict) -> list[str]:
    """What the engine will use, in the words an operator scans for (the JSON has it all)."""

    engine = f"{resolved.get('engine', 'engine')} {resolved.get('engine_version') or '(version unknown)'}"
    cc = resolved.get("compute_capability")
    head = click.style(f"{engine} will use" + (f" (compute capability {cc})" if cc else "") + ":", bold=True)
    lines = [head]
    kv = resolved.get("kv_cache_dtype")
    if kv:
        storage = resolved.get("kv_cache_storage")
        extra = f", stored as {storage}" if storage and storage != kv else ""
        block = f" · block {resolved['block_size']}" if resolved.get("block_size") else ""
        lines.append(f"  KV cache      {kv}{extra}{block}")
    if resolved.get("attention_backend") or resolved.get("candidates"):  # engines that choose one
        backend = resolved.get("attention_backend") or click.style("none valid", fg="red")
        forced = f" (forced {resolved['forced_backend']})" if resolved.get("forced_backend") else ""
        mla = f" · MLA, head size {resolved['head_size']}" if resolved.get("use_mla") else ""
        lines.append(f"  attention     {backend}{forced}{mla}")
    quant = resolved.get("quantization")
    if quant:
        kernels = resolved.get("quant_kernels") or {}
        parts = [f"{k} {v}" for k, v in kernels.items() if k != "fallback" and v]
        if kernels.get("fallback"):
            parts.append(click.style("weight-only fallback", fg="yellow"))
        lines.append(f"  quantization  {quant}" + (f" · {' · '.join(parts)}" if parts else ""))
    shown = {"engine", "engine_version", "compute_capability", "kv_cache_dtype", "kv_cache_storage",
             "block_size", "attention_backend", "forced_backend", "use_mla", "head_size", "quantization",
             "quant_kernels", "candidates"}
    for key, value in resolved.items():
        if key not in shown and value not in (None, "", [], {}):
            lines.append(f"  {key.replace('_', ' '):<13} {value}")
    return lines


def plan_line(plan: dict) -> str:
    """One line of the memory plan: weights, KV budget, tokens, concurrency, fit."""
    from servepilot.units import gib

    parts = []
    if plan.get("weights_per_gpu_bytes") is not None:
        parts.append(f"{gib(plan['weights_per_gpu_bytes'])} weights")
    if plan.get("available_kv_bytes") is not None:
        exact = "" if plan.get("available_exact") else " (estimate)"
        parts.append(f"{gib(plan['available_kv_bytes'])} KV{exact}")
    if plan.get("kv_tokens") is not None:
        parts.append(f"{plan['kv_tokens']:,} tokens")
    if plan.get("max_concurrency") is not None and plan.get("max_model_len"):
        parts.append(f"{plan['max_concurrency']:.2f}x at {plan['max_model_len']:,}")
    fits = plan.get("fits")
    if fits is not None:
        parts.append(click.style("fits", fg="green") if fits else click.style("does not fit", fg="red"))
    if plan.get("measured"):
        parts.append("measured by an earlier run")
    return click.style("memory per GPU: ", bold=True) + " · ".join(parts) + "  (servepilot plan for the table)"


@click.command()
@click.argument("code")
@click.option("--engine-version", metavar="VERSION", help="Also list the knowledge rows that hold for this engine "
                                                          "version.")
@JSON_OPTION
def explain(code, engine_version, as_json):
    """Show the facts behind rule CODE (e.g. SP-ATTN-001) and where they were read.

    \b
    Examples:
      servepilot explain SP-ATTN-001
      servepilot explain SP-KV-001 --engine-version 0.16.0   # with the knowledge rows for that release
    """
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
