"""`servepilot preflight`: probe every node and compare with the plan (Ray or probe files)."""

from __future__ import annotations

import click

from servepilot.cli.common import JSON_OPTION, multinode_options

SCHEMA = "servepilot.preflight/1"


@click.command("preflight", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--merge", "merge_files", multiple=True, metavar="PROBE.json",
              help="Probe files from `servepilot probe --json`, one per node in node order (repeatable; "
              "or several after one --merge).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=12.0, show_default=True,
              help="Seconds to wait for the nodes' probes (Ray); a node that does not answer is reported.")
@multinode_options
@JSON_OPTION
def preflight(merge_files, timeout_s, command, gpu, engine_version, command_file, nodes, ray_address, as_json) -> int:
    """Check every node of a multi-node deployment before launching it.

    Through Ray (--ray-address: one pinned probe per alive node, and the plan's GPU bundles
    placed without launching), or from `servepilot probe --json` files (--merge). Prints a
    PASS/FAIL row per node and the findings, worst first, with fixes.
    Exit codes: 0 every node passes, 1 a node fails, 2 bad input.

    \b
    Examples:
      servepilot preflight --ray-address 10.0.0.1:6379 -- \\
        vllm serve /models/m -tp 8 -pp 2 --distributed-executor-backend ray
      servepilot preflight --merge node0.json node1.json \\
        --command-file node0.sh --command-file node1.sh
    """
    from servepilot.errors import BadInput
    from servepilot.multinode.analysis import analyze_command_set

    files, command, late_json = _split_merge(merge_files, list(command))
    as_json = as_json or late_json
    if not files and not ray_address:
        raise BadInput("preflight needs the nodes: --ray-address HOST:PORT, or --merge with probe files")
    if files and ray_address:
        raise BadInput("give --ray-address or --merge, not both")
    a = analyze_command_set(command, tuple(command_file or ()), nodes=nodes or (len(files) if files else None),
                            ray_address=ray_address, gpu=gpu, engine_version=engine_version)
    if files:
        from servepilot.multinode.preflight import preflight_from_files

        report = preflight_from_files(a, files)
    else:
        from servepilot.multinode.preflight import preflight_on_ray

        report = preflight_on_ray(a, ray_address, timeout_s=timeout_s)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(SCHEMA, report.to_json())
    else:
        render(report)
    return report.exit_code


def _split_merge(merge_files, command: list[str]) -> tuple[list[str], list[str], bool]:
    """`--merge a.json b.json [--json] [-- CMD]`: click gives --merge one value; the other
    .json words (and a --json after them) arrive at the front of the command."""
    files = list(merge_files)
    late_json = False
    while files and command and (command[0].endswith(".json") or command[0] == "--json"):
        word = command.pop(0)
        if word == "--json":
            late_json = True
        else:
            files.append(word)
    if command and command[0] == "--":
        command.pop(0)
    return files, command, late_json


def render(report) -> None:
    from servepilot.cli.multinode_views import render_node_findings, render_topology

    echo = click.echo
    render_topology(report.analysis)
    echo("")
    echo(click.style(f"preflight ({report.transport}): {len(report.nodes)} node(s)", bold=True))
    echo(f"  {'node':<7} {'status':<6} {'host':<16} {'address':<16} {'GPUs':>4} {'ranks':>5}  findings")
    for n in report.nodes:
        style = "green" if n.status == "PASS" else "red"
        echo(f"  {n.name:<7} " + click.style(f"{n.status:<6}", fg=style, bold=True)
             + f" {(n.host or '-')[:16]:<16} {(n.address or n.source or '-')[:16]:<16} "
             f"{'-' if n.gpus is None else n.gpus:>4} {'-' if n.ranks is None else n.ranks:>5}  "
             f"{n.errors} error(s), {n.warnings} warning(s)")
    if report.placement:
        p = report.placement
        where = ", ".join(f"{k}: {v}" for k, v in (p.get("per_node") or {}).items())
        echo(f"  placement of {p['bundles']} GPU bundles: "
             + ("placed (" + where + ")" if p["feasible"] else "infeasible"))
    render_node_findings(report.findings)
    for note in report.notes:
        echo(click.style(f"note: {note}", dim=True))
    echo(click.style(f"verdict: {'FAIL' if report.exit_code else 'PASS'}", fg="red" if report.exit_code else "green",
                     bold=True))
