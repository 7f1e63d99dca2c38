"""Options shared by every verb that takes an engine command: `servepilot VERB [opts] -- CMD`."""

from __future__ import annotations

import click

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")

# Every verb that takes an engine command reads it the same way: servepilot's own options
# first, then the command (after `--`, or from its first word on): the engine's flags are
# never mistaken for servepilot's, and `--` may be left out.
ENGINE_COMMAND_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def _remember(ctx, param, value):
    ctx.meta[f"servepilot.{param.name}"] = value
    return value


def _command_or_source(ctx, param, value):
    """The trailing command; `--compose FILE` / `--manifest FILE` stand for the command that
    starts them (`docker compose -f FILE up [SERVICE]`, `kubectl apply -f FILE`)."""
    compose = ctx.meta.get("servepilot.compose")
    manifest = ctx.meta.get("servepilot.manifest")
    service = ctx.meta.get("servepilot.service")
    if compose and manifest:
        raise click.UsageError("give --compose or --manifest, not both")
    source = compose or manifest
    if source and value:
        raise click.UsageError(f"give the engine command after `--` or --{'compose' if compose else 'manifest'}, not "
                               "both")
    if service and not source:
        raise click.UsageError("--service goes with --compose FILE or --manifest FILE")
    if not source:
        return value
    from servepilot.engines.manifests import compose_command, manifest_command

    return tuple(compose_command(compose, service) if compose else manifest_command(manifest, service))


def deployment_options(f, per_node: bool = False):
    """--gpu, --engine-version, --command-file, --compose/--manifest [--service] and the
    trailing command after `--`."""
    f = click.argument("command", nargs=-1, type=click.UNPROCESSED, callback=_command_or_source)(f)
    f = click.option("--service", metavar="NAME", expose_value=False, callback=_remember, is_eager=True,
                     help="The compose service (or Kubernetes workload/container) to read.")(f)
    f = click.option("--manifest", metavar="FILE", expose_value=False, callback=_remember, is_eager=True,
                     help="Read the engine command from a Kubernetes manifest (Deployment, StatefulSet, "
                          "LeaderWorkerSet, KServe InferenceService, RayService).")(f)
    f = click.option("--compose", metavar="FILE", expose_value=False, callback=_remember, is_eager=True,
                     help="Read the engine command from a docker compose file.")(f)
    f = click.option(
        "--command-file",
        type=click.Path(dir_okay=False),
        multiple=per_node,
        help=("Read the engine command from a shell script instead of after `--`; once per node, in node "
              "order, for a multi-node deployment." if per_node else
              "Read the engine command from a shell script instead of after `--`."),
    )(f)
    f = click.option(
        "--engine-version",
        metavar="VERSION",
        help="Engine version to reason about (default: the installed one, if any).",
    )(f)
    f = click.option(
        "--gpu",
        metavar="NAME[xN]",
        help="GPUs to reason about instead of probing, e.g. rtx-pro-6000x8, h200x8, a100-40gbx2, t4; "
             "different GPUs in CUDA order joined by +: rtx-5070-ti+rtx-5090.",
    )(f)
    return f


def multinode_options(f):
    """deployment_options with a repeatable --command-file (one per node), --nodes and
    --ray-address: a command set that spans nodes (check, plan, deployment)."""
    f = deployment_options(f, per_node=True)
    f = click.option("--ray-address", metavar="HOST:PORT",
                     help="A Ray cluster to read the nodes and their GPUs from (Ray launches).")(f)
    f = click.option("--nodes", type=click.IntRange(min=1), metavar="N",
                     help="Nodes a Ray-launched command spans (--distributed-executor-backend ray); "
                     "or pods of one LeaderWorkerSet template.")(f)
    return f


def build_deployment_from_cli(command, gpu, engine_version, command_file):
    """Parse the command and probe or look up the GPUs (one library call)."""
    from servepilot.deployment import build_deployment

    if isinstance(command_file, (tuple, list)):
        if len(command_file) > 1:
            from servepilot.errors import BadInput

            raise BadInput("this verb takes one command; several --command-file (one per node) are read by "
                           "check, plan, deployment and preflight")
        command_file = command_file[0] if command_file else None

    return build_deployment(
        command=list(command),
        gpu=gpu,
        engine_version=engine_version,
        command_file=command_file,
    )
