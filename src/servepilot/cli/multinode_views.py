"""check, plan and deployment on a multi-node command set: one library call each, then render.

The JSON of each verb keeps its schema and keys and adds `multinode` (docs/json/preflight.md
describes that object); node findings join `findings` with their `check` and `nodes` keys.
"""

from __future__ import annotations

import click

_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}


def _analyze(command, command_files, nodes, ray_address, gpu, engine_version):
    from servepilot.multinode.analysis import analyze_command_set

    return analyze_command_set(list(command), tuple(command_files or ()), nodes=nodes, ray_address=ray_address,
                               gpu=gpu, engine_version=engine_version)


def check_set(command, command_files, nodes, ray_address, gpu, engine_version, as_json) -> int:
    from servepilot.checks import run_checks
    from servepilot.cli import check_cmd

    a = _analyze(command, command_files, nodes, ray_address, gpu, engine_version)
    result = run_checks(a.head)
    errors = any(f.severity == "error" for f in a.findings) or result.verdict == "fail"
    verdict = "fail" if errors else result.verdict
    if verdict == "pass" and any(f.severity == "warning" for f in a.findings):
        verdict = "warn"
    if as_json:
        from servepilot.cli.output import emit_json

        body = result.to_json()
        body["verdict"] = verdict
        body["findings"] = [f.to_json() for f in a.findings] + list(body["findings"])
        body["multinode"] = a.to_json()
        emit_json(result.JSON_SCHEMA, body)
    else:
        render_topology(a)
        render_node_findings(a.findings)
        click.echo("")
        click.echo(click.style(f"node 0's command on the whole cluster ({a.head.cluster.count} GPUs):", bold=True))
        check_cmd.render(result)
        click.echo(click.style(f"multi-node verdict: {verdict.upper()}", bold=True))
    return 1 if verdict == "fail" else 0


def plan_set(command, command_files, nodes, ray_address, gpu, engine_version, as_json) -> int:
    from servepilot.cli import plan_cmd
    from servepilot.multinode.nodeplan import plan_per_node
    from servepilot.planning import plan_deployment

    a = _analyze(command, command_files, nodes, ray_address, gpu, engine_version)
    result = plan_deployment(a.head)
    per_node = plan_per_node(a, result)
    if as_json:
        from servepilot.cli.output import emit_json
        from servepilot.jsonable import to_jsonable

        body = result.to_json()
        body["multinode"] = a.to_json() | {"memory": to_jsonable(per_node)}
        emit_json(result.JSON_SCHEMA, body)
    else:
        render_topology(a)
        from servepilot.units import gib

        click.echo(click.style("memory per node (per GPU):", bold=True))
        for m in per_node:
            layers = ", ".join(f"{lo}-{hi}" for lo, hi in m.layers) or "-"
            experts = (f" · {m.experts_per_gpu} experts/GPU ({m.experts_on_node} on the node)"
                       if m.experts_per_gpu else "")
            click.echo(f"  {m.node}: {m.ranks} GPU(s) · PP stage(s) {list(m.pp_stages)} · layers {layers} · "
                       f"weights {gib(m.weights_per_gpu_bytes)} · KV {gib(m.kv_per_gpu_bytes)} · "
                       f"min free {gib(m.min_free_bytes)}{experts}")
        click.echo("")
        plan_cmd.render_text(result)
    return 0 if result.ok else 1


def deployment_set(command, command_files, nodes, ray_address, gpu, engine_version, as_json) -> int:

    a = _analyze(command, command_files, nodes, ray_address, gpu, engine_version)
    if as_json:
        from servepilot.cli.output import emit_json

        body = a.head.to_json()
        body["multinode"] = a.to_json()
        emit_json(a.head.JSON_SCHEMA, body)
    else:
        render_topology(a)
        render_node_findings(a.findings)
    return 0


def render_topology(a) -> None:
    from servepilot.engines.cmdline import render_command

    t = a.topology
    echo = click.echo
    per = f"{a.gpus_per_node} GPUs per node" if a.gpus_per_node else "GPUs per node unknown"
    echo(click.style(f"{a.command_set.engine} multi-node ({t.shape}): {t.node_count} node(s), {per}", bold=True))
    echo(f"  world size {t.world_size} = TP {t.tp} x PP {t.pp} x DP {t.dp} · API on {', '.join(t.api_nodes) or 'none'}")
    cmds = a.command_set.nodes
    for role in t.nodes:
        node = cmds[role.index] if role.index < len(cmds) else cmds[0]
        ranks = f"ranks {role.first_rank}-{role.first_rank + role.ranks - 1}" if role.ranks else "no GPU worker"
        dp = f" · DP ranks {list(role.dp_ranks)}" if role.dp_ranks else ""
        api = " · API" if role.serves_api else ""
        echo(f"  {role.name}: {ranks}{dp}{api}   [{node.origin}] {render_command(node.launch)}")
    for note in a.notes:
        echo(click.style(f"note: {note}", dim=True))


def render_node_findings(findings) -> None:
    echo = click.echo
    if not findings:
        echo(click.style("the nodes agree: no node_mismatch finding", fg="green"))
        return
    for f in findings:
        x = f.finding
        who = f" [{', '.join(f.nodes)}]" if f.nodes else ""
        echo("")
        echo(click.style(f"[{x.severity}] {x.code} {f.check}{who}: {x.title}", fg=_SEVERITY_STYLE[x.severity],
                         bold=True))
        for line in x.detail.splitlines():
            echo(f"    {line}")
        for e in x.evidence:
            echo(f"    - {e.fact}  [{e.source}]")
        for i, r in enumerate(x.remedies, 1):
            echo(f"    fix {i}. ({r.kind}) {r.change}  (trade-off: {r.tradeoff})")
