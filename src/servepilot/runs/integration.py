"""The one place runs/ calls into the other layers: deployment, check, plan, triage, overlay.

Plain imports: every edge is visible, and a missing module is an installation error, not
something to paper over. One thing degrades on purpose: `--force` launches a command
servepilot cannot read (read then with the engines' own shell splitter, no engine parse).
Triage of a run's log is in runs/diagnose.py, which `ps` uses without loading the rest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servepilot.checks import run_checks
from servepilot.deployment import build_deployment
from servepilot.engines.command import ShellContext
from servepilot.engines.shell import command_text, read_command_file, split_shell_line
from servepilot.errors import CommandLineError, ServepilotError
from servepilot.jsonable import to_jsonable
from servepilot.overlay.manifest import read_manifest
from servepilot.overlay.paths import MANIFEST_NAME
from servepilot.planning import plan_deployment


@dataclass(frozen=True)
class LaunchCommand:
    """What launch needs to know about the engine command: from the deployment layer, or
    (an unreadable command launched with --force) from the shell split alone."""

    argv: tuple[str, ...]
    engine: str | None
    engine_version: str | None
    model: str | None
    host: str | None
    port: int | None
    program: str | None
    env: dict = field(default_factory=dict)
    ssh_host: str | None = None
    dropped: tuple[str, ...] = ()  # shell parts servepilot does not run ("> log", "&", "nohup")
    options: dict = field(default_factory=dict)  # flags as the engine understands them (history diff)
    gpus: tuple[dict, ...] = ()
    gpu_key: str | None = None
    deployment: Any = field(default=None, metadata={"json": False})
    notes: tuple[str, ...] = ()
    cwd: str | None = None  # where the command's own `cd` prefix leaves it


def build_launch_command(command: list[str], gpu: str | None, engine_version: str | None,
                         command_file: str | None, force: bool = False) -> LaunchCommand:
    try:
        dep = build_deployment(command=list(command), gpu=gpu, engine_version=engine_version,
                               command_file=command_file)
    except ServepilotError as exc:
        # A command or checkpoint servepilot cannot read (an unknown program, a missing or
        # truncated model file) is refused: the launch would fail or run blind.
        if not force:
            raise type(exc)(exc.problem, path=exc.path,
                            hint=(exc.hint + "; " if exc.hint else "") + "--force launches it unchecked") from exc
        unchecked = unchecked_command(command, command_file, engine_version)
        return dataclasses.replace(unchecked, notes=(
            f"servepilot cannot read this deployment ({exc.one_line()}); launched unchecked (--force)",))
    launch = dep.launch
    shell = launch.shell
    dropped = []
    if shell.nohup:
        dropped.append("nohup")
    if shell.stdout_file:
        dropped.append(f"{'>>' if shell.append else '>'} {shell.stdout_file}")
    if shell.stderr_file and shell.stderr_file != shell.stdout_file:
        dropped.append(f"2> {shell.stderr_file}")
    if shell.background:
        dropped.append("&")
    dropped.extend(f"; {c}" for c in shell.tail)
    # The shell layer keeps each prefix with its own separator ("pkill -f x;", "cd /d &&").
    # A `cd` is not dropped: the run starts in the directory it leads to (dep.extra["cwd"]).
    cwd = (dep.extra or {}).get("cwd")
    dropped.extend(
        c if c.rstrip().endswith((";", "&&", "||", "&")) else f"{c};"
        for c in shell.prefix_commands
        if not (cwd and c.split()[:1] == ["cd"])
    )
    gpus = tuple(
        {"index": g.index, "name": g.name, "key": g.key, "memory_bytes": g.memory_bytes}
        for g in dep.cluster.gpus
    )
    # The planner looks measurements up by the first GPU's catalog key (planning/plan.py
    # _measured); record them under the same key.
    gpu_key = dep.cluster.gpus[0].key if dep.cluster.gpus else None
    port = launch.port
    return LaunchCommand(
        argv=tuple(launch.run_argv),  # a container command runs as written, wrapper included
        engine=launch.engine,
        engine_version=launch.engine_version,
        model=launch.model,
        host=launch.get("host"),
        port=port,
        program=launch.program,
        env=dict(shell.env),
        ssh_host=shell.ssh_host,
        dropped=tuple(dropped),
        options=to_jsonable(dict(launch.options)),
        gpus=gpus,
        gpu_key=gpu_key,
        deployment=dep,
        notes=tuple(dep.notes) + tuple(getattr(launch, "notes", ()) or ()),
        cwd=cwd,
    )


def unchecked_command(command: list[str], command_file: str | None, engine_version: str | None) -> LaunchCommand:
    """The first command of the line as it will run, for `--force` on a command that is no
    engine servepilot knows: the engines' shell splitter takes the leading K=V, nohup, the
    redirections, `&` and what comes before and after; the rest is run as written."""
    if not command_file and len(command) > 1:
        # Words after `--`: the operator's shell already split them; they run as given (a
        # `sh -c '"$@" &' sh ...` launcher included), after the leading K=V, env and nohup.
        argv, ctx = _leading_words(list(command))
    else:
        text = read_command_file(command_file) if command_file else command_text(command)
        split = split_shell_line(text, is_engine=lambda argv: True)
        argv, ctx = list(split.argv), split.context
    if not argv:
        raise CommandLineError("no command given", hint="servepilot launch -- vllm serve MODEL ...")
    dropped = (["nohup"] if ctx.nohup else []) + [f"{'>>' if ctx.append else '>'} {ctx.stdout_file}"] * bool(
        ctx.stdout_file)
    if ctx.stderr_file and ctx.stderr_file != ctx.stdout_file:
        dropped.append(f"2> {ctx.stderr_file}")
    if ctx.background:
        dropped.append("&")
    dropped += [*ctx.prefix_commands, *(f"; {c}" for c in ctx.tail)]
    opts = flag_values(argv)
    port = opts.get("port")
    return LaunchCommand(
        argv=tuple(argv), engine=None, engine_version=engine_version,
        model=opts.get("model") or opts.get("model-path") or opts.get("m"),
        host=opts.get("host"), port=int(port) if port and port.isdigit() else None,
        program=" ".join(argv[:3]), env=dict(ctx.env), ssh_host=ctx.ssh_host, dropped=tuple(dropped),
        options=opts,
    )


def _leading_words(words: list[str]) -> tuple[list[str], ShellContext]:
    env: dict[str, str] = {}
    nohup = False
    while words:
        head = words[0]
        if head == "env":
            words = words[1:]
        elif head == "nohup":
            nohup, words = True, words[1:]
        elif "=" in head and head.split("=", 1)[0].isidentifier():
            key, value = head.split("=", 1)
            env[key] = value
            words = words[1:]
        else:
            break
    return words, ShellContext(env=env, nohup=nohup)


def flag_values(argv: list[str]) -> dict[str, str]:
    """`--name value`, `--name=value` and bare `--flag` ("true") as {name: value}."""
    out: dict[str, str] = {}
    for i, w in enumerate(argv):
        if w.startswith("-") and len(w) > 1:
            name, eq, val = w.lstrip("-").partition("=")
            if eq:
                out[name] = val
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                out[name] = argv[i + 1]
            else:
                out[name] = "true"
    return out


def run_check(cmd: LaunchCommand, force: bool = False) -> tuple[Any, str | None]:
    """(CheckResult or None, a note when check could not run).

    A check that cannot read the deployment stops the launch (fail closed) unless `force`.
    """
    if cmd.deployment is None:
        return None, None  # the command's own note says why it could not be read
    try:
        from servepilot.runs.store import measurement_for

        return run_checks(cmd.deployment, measured=measurement_for(cmd.deployment)), None
    except ServepilotError as exc:
        if not force:
            raise
        return None, f"check could not run ({exc.one_line()}); launching anyway (--force)"


def plan(cmd: LaunchCommand, check: Any = None) -> tuple[Any, str | None]:
    """The memory plan: check's summary when check made one, else the planner's."""
    if check is not None and getattr(check, "plan", None):
        return check.plan, None
    if cmd.deployment is None:
        return None, None
    try:
        from servepilot.runs.store import measurement_for

        return plan_deployment(cmd.deployment, measured=measurement_for(cmd.deployment)), None
    except ServepilotError as exc:  # no prediction to compare with; the launch itself may still work
        return None, f"no memory plan: {exc.one_line()}"


def overlay_of(model: str | None) -> dict[str, Any] | None:
    """When the model directory is a servepilot overlay: its original and patch hash."""
    if not model or not (Path(model) / MANIFEST_NAME).is_file():
        return None
    try:
        m = read_manifest(Path(model))
    except Exception as exc:  # a broken manifest must not stop a launch; record why
        return {"dir": model, "error": str(exc)}
    return {"dir": model, "original": m.original, "patches_hash": m.patches_hash, "patches": m.patches}
