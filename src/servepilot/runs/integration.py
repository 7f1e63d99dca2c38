"""The one place runs/ calls into the other layers: deployment, check, plan, triage, overlay.

Each call degrades cleanly when its module is not present at import time (the layers are
built in parallel): the launch still runs, and the record says in words what was not
available. Anything else those modules raise (bad input) propagates as usual.
"""

from __future__ import annotations

import dataclasses
import importlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servepilot.errors import CommandLineError, ServepilotError
from servepilot.jsonable import to_jsonable


def _optional(module: str, attr: str):
    """`module.attr`, or None when the module (or the name) is not there yet."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Only swallow the absence of the module itself, never a broken import inside it.
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            return None
        raise
    return getattr(mod, attr, None)


@dataclass(frozen=True)
class LaunchCommand:
    """What launch needs to know about the engine command, from the deployment layer or,
    when that is missing, from a minimal shell split of our own."""

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
    build = _optional("servepilot.deployment", "build_deployment")
    if build is None:
        return _fallback_command(command, command_file, engine_version)
    try:
        dep = build(command=list(command), gpu=gpu, engine_version=engine_version, command_file=command_file)
    except ServepilotError as exc:
        # A command or checkpoint servepilot cannot read (an unknown program, a missing or
        # truncated model file) is refused: the launch would fail or run blind.
        if not force:
            raise type(exc)(exc.problem, path=exc.path,
                            hint=(exc.hint + "; " if exc.hint else "") + "--force launches it unchecked") from exc
        fallback = _fallback_command(command, command_file, engine_version)
        return dataclasses.replace(fallback, notes=(f"servepilot cannot read this deployment ({exc.one_line()}); launched unchecked (--force)",))
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


_REDIRECTS = (">", ">>", "1>", "1>>", "2>", "2>>", "&>", "&>>")


def _fallback_command(command: list[str], command_file: str | None, engine_version: str | None) -> LaunchCommand:
    """A minimal reading of the command for when servepilot.deployment is not installed:
    leading K=V, ssh, nohup, redirections and `&`; engine, model, host and port."""
    if command_file:
        try:
            text = Path(command_file).read_text()
        except OSError as exc:
            raise CommandLineError(f"cannot read the command file: {exc.strerror}", path=command_file) from exc
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    elif len(command) == 1 and any(c.isspace() for c in command[0]):
        words = shlex.split(command[0])
    else:
        words = list(command)
    if not words:
        raise CommandLineError("no engine command given", hint="servepilot launch -- vllm serve MODEL ...")
    ssh_host = None
    if words[0] == "ssh" and len(words) > 1:
        ssh_host = words[1]
    env: dict[str, str] = {}
    dropped: list[str] = []
    argv: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if not argv and w == "env":
            i += 1
            continue
        if not argv and "=" in w and w.split("=", 1)[0].isidentifier():
            k, v = w.split("=", 1)
            env[k] = v
        elif not argv and w == "nohup":
            dropped.append(w)
        elif w in _REDIRECTS and i + 1 < len(words):
            dropped.append(f"{w} {words[i + 1]}")
            i += 1
        elif w in ("2>&1", "&"):
            dropped.append(w)
        elif w in (";", "&&"):
            dropped.append(" ".join(words[i:]))
            break
        else:
            argv.append(w)
        i += 1
    joined = " ".join(argv[:3])
    engine = (
        "vllm" if "vllm" in joined else
        "sglang" if "sglang" in joined else
        "llama.cpp" if ("llama-server" in joined or "llama_cpp" in joined) else None
    )
    opts = flag_values(argv)
    model = opts.get("model") or opts.get("model-path") or opts.get("m")
    if model is None and engine == "vllm" and len(argv) > 2 and argv[1] == "serve":
        model = argv[2]
    port = opts.get("port")
    return LaunchCommand(
        argv=tuple(argv), engine=engine, engine_version=engine_version, model=model,
        host=opts.get("host"), port=int(port) if port and port.isdigit() else None,
        program=joined, env=env, ssh_host=ssh_host, dropped=tuple(dropped), options=opts,
        notes=("servepilot.deployment is not installed: the command was read with a minimal parser",),
    )


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
    run_checks = _optional("servepilot.checks", "run_checks")
    if cmd.deployment is None:
        return None, None  # the command's own note says why it could not be read
    if run_checks is None:
        return None, "check is not available in this build; launching without a prediction"
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
    plan_deployment = _optional("servepilot.planning", "plan_deployment")
    if cmd.deployment is None:
        return None, None
    if plan_deployment is None:
        return None, "no memory plan: the planner is not available in this build"
    try:
        from servepilot.runs.store import measurement_for

        return plan_deployment(cmd.deployment, measured=measurement_for(cmd.deployment)), None
    except ServepilotError as exc:  # no prediction to compare with; the launch itself may still work
        return None, f"no memory plan: {exc.one_line()}"


def triage_log(path: Path, engine: str | None) -> dict[str, Any]:
    """The diagnosis of a failed run's log as a JSON-ready dict (contract keys of DESIGN.md)."""
    triage_file = _optional("servepilot.triage", "triage_file")
    if triage_file is None:
        return _fallback_diagnosis(path, "servepilot.triage is not available in this build")
    try:
        return to_jsonable(triage_file(path, engine=engine))
    except Exception as exc:  # the run failed either way; a triage bug must not hide the log
        return _fallback_diagnosis(path, f"triage failed ({type(exc).__name__}: {exc})")


def warm_triage() -> None:
    """Import triage and parse its signature table ahead of need (about 0.1-0.2 s), so the
    diagnosis of an engine that dies prints without that delay."""
    load = _optional("servepilot.triage.signatures", "load_signatures")
    if load is not None:
        try:
            load()
        except Exception:  # noqa: BLE001 - warming is best effort; triage_log reports real errors
            pass


def _fallback_diagnosis(path: Path, why: str) -> dict[str, Any]:
    """Without triage: the last line that looks like an error, category `other`."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    markers = ("Error", "ERROR", "error:", "Traceback", "FATAL", "failed")
    numbered = list(enumerate(lines, start=1))
    line_no, last = next(((i, ln) for i, ln in reversed(numbered) if any(m in ln for m in markers)),
                         numbered[-1] if numbered else (0, ""))
    return {
        "root_cause": {
            "category": "other",
            "signature": None,
            "line": line_no,
            "process": None,
            "excerpt": last.strip(),
            "message": last.strip(),
            "explanation": f"{why}; this is the last error-looking line of the log",
        },
        "remedies": [],
        "other_errors": [],
        "stale": False,
    }


def overlay_of(model: str | None) -> dict[str, Any] | None:
    """When the model directory is a servepilot overlay: its original and patch hash."""
    if not model:
        return None
    read_manifest = _optional("servepilot.overlay.manifest", "read_manifest")
    name = _optional("servepilot.overlay.paths", "MANIFEST_NAME")
    if read_manifest is None or name is None or not (Path(model) / name).is_file():
        return None
    try:
        m = read_manifest(Path(model))
    except Exception as exc:  # a broken manifest must not stop a launch; record why
        return {"dir": model, "error": str(exc)}
    return {"dir": model, "original": m.original, "patches_hash": m.patches_hash, "patches": m.patches}
