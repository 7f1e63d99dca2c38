"""`servepilot launch | ps | logs | stop | history | cleanup`: parse, one library call, render."""

from __future__ import annotations

import shlex
import sys
import time

import click

from servepilot.cli.common import ENGINE_COMMAND_SETTINGS, JSON_OPTION, deployment_options
from servepilot.cli.output import emit_json, human_bytes

LAUNCH_SCHEMA = "servepilot.launch/1"


def _echo(msg: str = "", err: bool = False) -> None:
    click.echo(msg, err=err)
    (sys.stderr if err else sys.stdout).flush()


def _fix_hint(command, command_file, gpu=None, engine_version=None) -> str:
    """The `servepilot fix` line for the same command, GPUs and engine version."""
    opts = "".join(f" {flag} {shlex.quote(v)}" for flag,
                   v in (("--gpu", gpu), ("--engine-version", engine_version)) if v)
    if command_file:
        return f"servepilot fix{opts} --command-file {shlex.quote(command_file)}"
    return f"servepilot fix{opts} -- " + (command[0] if len(command) == 1 else shlex.join(command))


def _print_findings(check) -> None:
    for f in getattr(check, "findings", ()) or ():
        _echo(f"  {f.severity.upper():7} {f.code} [{f.category}] {f.title}")
        if f.remedies:
            r = f.remedies[0]
            _echo(f"          fix ({r.kind}): {r.change}" + (f" — {r.tradeoff}" if r.tradeoff else ""))


def _print_diagnosis(diag: dict) -> None:
    root = diag.get("root_cause") or {}
    _echo(f"root cause: {root.get('category', '?')}" + (f" ({root['signature']})" if root.get("signature") else ""))
    text = root.get("message") or root.get("excerpt")
    if text:
        where = f"[{root['process']}] " if root.get("process") else ""
        at = f"line {root['line']}: " if root.get("line") else ""
        _echo(f"  {at}{where}{text}")
    if root.get("explanation"):
        _echo(f"  {root['explanation']}")
    for r in diag.get("remedies") or []:
        if isinstance(r, dict):
            _echo(f"  fix ({r.get('kind')}): {r.get('change')}" + (f" — {r['tradeoff']}" if r.get("tradeoff") else ""))


class _Progress:
    """Phase lines as the log reveals them; shard progress at most once a second."""

    def __init__(self, started: float):
        self.started = started
        self.last_progress = 0.0

    def __call__(self, event) -> None:
        from servepilot.runs.phases import PHASE_LABELS

        t = time.monotonic() - self.started
        if event.kind == "phase":
            _echo(f"[{t:6.1f}s] {PHASE_LABELS.get(event.phase, event.phase)}")
        elif event.kind == "progress":
            v = event.values
            last = v.get("shard") == v.get("shards")
            if last or time.monotonic() - self.last_progress >= 1.0:
                self.last_progress = time.monotonic()
                _echo(f"[{t:6.1f}s]   weight shards {v.get('shard')}/{v.get('shards')} ({v.get('percent')}%)")
        elif event.kind == "figure":
            shown = {k: v for k, v in event.values.items() if k != "engine_version"}
            if shown:
                text = ", ".join(f"{k}={human_bytes(v) if k.endswith('_bytes') else v}" for k, v in shown.items())
                _echo(f"[{t:6.1f}s]   {text}")
        elif event.kind == "fatal":
            _echo(f"[{t:6.1f}s] fatal: {event.line}")


def _fmt(v) -> str:
    if v is None:
        return "?"
    if isinstance(v, float):
        return f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _outcome_payload(run, outcome, plan) -> dict:
    return {
        "run_id": run.run_id,
        "name": run.record.get("name"),
        "state": outcome.state,
        "run_dir": str(run.run_dir),
        "log": str(run.log_path),
        "pid": run.identity.pid,
        "pgid": run.identity.pgid,
        "engine": plan.command.engine,
        "model": plan.command.model,
        "url": outcome.url,
        "served_models": list(outcome.served_models),
        "measured": outcome.figures,
        "predicted": outcome.predicted,
        "exit_code": outcome.exit_code,
        "reason": outcome.reason,
        "diagnosis": outcome.diagnosis,
        "notes": list(plan.notes),
        "elapsed_s": round(outcome.elapsed_s, 3),
    }


@click.command(context_settings=ENGINE_COMMAND_SETTINGS)
@click.option("--name", help="A name for the run (a prefix of its id; `stop NAME` works).")
@click.option("--detach", is_flag=True, help="Return once the engine is ready; it keeps running.")
@click.option("--force", is_flag=True, help="Launch even when check predicts a failure.")
@click.option("--ready-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Give up (and stop the engine) if it is not ready after S seconds (default 1800).")
@click.option("--ask-engine", is_flag=True, help="Before starting, ask the installed vLLM itself (as check "
                                                 "--ask-engine).")
@click.option("--engine-python", metavar="PATH", help="The python of the engine's environment, for --ask-engine.")
@deployment_options
@JSON_OPTION
def launch(name, detach, force, ready_timeout, ask_engine, engine_python, gpu, engine_version, command_file, command,
           as_json):
    """Run the engine under supervision: check, start, follow the load phases, probe readiness.

    Refuses (exit 1) when `check` predicts a failure, unless --force. Exit 3 when the engine
    fails to become ready (the log is triaged); Ctrl-C stops the engine's own process group.

    \b
    Examples:
      servepilot launch --name kimi -- vllm serve /models/kimi-overlay -tp 8
      servepilot launch --detach -- python -m llama_cpp.server --model m.gguf --port 8001
      servepilot launch --command-file serve.sh --ready-timeout 3600
    """
    from servepilot.runs import launch as runs_launch
    from servepilot.runs.rundir import check_name

    if name:
        check_name(name)
    plan = runs_launch.prepare_launch(list(command), gpu=gpu, engine_version=engine_version,
                                      command_file=command_file, force=force, ask_engine=ask_engine,
                                      engine_python=engine_python)
    if plan.predicted_failure and not force:
        hint = _fix_hint(command, command_file, gpu, engine_version)
        if as_json:
            from servepilot.jsonable import to_jsonable

            emit_json(LAUNCH_SCHEMA, {"state": "refused", "check": to_jsonable(plan.check), "suggestion": hint,
                                      "notes": list(plan.notes)})
        else:
            _echo("check predicts this launch will fail; not starting it (--force to launch anyway):")
            _print_findings(plan.check)
            _echo(f"try: {hint}")
        return 1
    if not as_json:
        for note in plan.notes:
            _echo(f"note: {note}")
        if plan.predicted_failure:
            _echo("check predicts a failure; launching anyway (--force)")
    from servepilot.runs.lifecycle import Hooks, run_launch

    progress = None if as_json else _Progress(time.monotonic())

    def started(run) -> None:
        if not as_json:
            _echo(f"run {run.run_id}: pid {run.identity.pid}, log {run.log_path}")

    def ready(run, outcome) -> None:  # foreground only: before waiting for the engine's exit
        if as_json:
            emit_json(LAUNCH_SCHEMA, _outcome_payload(run, outcome, plan))
        else:
            _print_ready(run, outcome)
            _echo("serving; Ctrl-C stops the engine")

    def interrupted(run) -> None:
        if not as_json:
            _echo("\ninterrupted: stopping the engine's process tree", err=True)

    end = run_launch(plan, name=name, detach_when_ready=detach, ready_timeout_s=ready_timeout,
                     hooks=Hooks(on_started=started, on_event=progress, on_ready=ready,
                                 on_interrupt=interrupted))
    return _render_end(end, plan, as_json)


def _render_end(end, plan, as_json) -> int:
    run, outcome = end.run, end.outcome
    if end.interrupted is not None:
        if as_json:
            emit_json(LAUNCH_SCHEMA, {"run_id": run.run_id, "state": "stopped", "reason": end.interrupted})
        return end.code
    if outcome.state != "ready":
        if as_json:
            emit_json(LAUNCH_SCHEMA, _outcome_payload(run, outcome, plan))
        elif outcome.state == "stopped":
            _echo(f"run {run.run_id} {outcome.reason}")
        else:
            _echo(f"run {run.run_id} failed after {outcome.elapsed_s:.1f}s: {outcome.reason}")
            _print_diagnosis(outcome.diagnosis or {})
            _echo(f"log: {run.log_path}")
        return end.code
    if end.detached:
        if as_json:
            emit_json(LAUNCH_SCHEMA, _outcome_payload(run, outcome, plan))
        else:
            _print_ready(run, outcome)
            _echo(f"detached; stop it with: servepilot stop {run.record.get('name') or run.run_id}")
        return end.code
    if not as_json:
        _echo(f"engine exited with code {end.exit_code}")
        if end.diagnosis:
            _print_diagnosis(end.diagnosis)
    return end.code


def _print_ready(run, outcome) -> None:
    _echo(f"ready after {outcome.elapsed_s:.1f}s: {outcome.url}")
    if outcome.served_models:
        _echo(f"  served model: {', '.join(outcome.served_models)}")
    m, p = outcome.figures, outcome.predicted or {}
    _echo(f"  KV tokens:       measured {_fmt(m.get('kv_tokens'))}   planned {_fmt(p.get('kv_tokens'))}")
    _echo(f"  max concurrency: measured {_fmt(m.get('max_concurrency'))}   planned {_fmt(p.get('max_concurrency'))}")


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Every recorded run (default: the last 20).")
@JSON_OPTION
def ps(show_all, as_json):
    """List runs with their state, checked against the live pid and its start time.

    \b
    Examples:
      servepilot ps
      servepilot ps --all --json
    """
    from servepilot.runs.manage import list_runs

    rows = list_runs(limit=None if show_all else 20)
    if as_json:
        emit_json("servepilot.ps/1", {"runs": rows})
        return 0
    if not rows:
        _echo("no runs yet")
        return 0
    _echo(f"{'RUN':<34} {'STATE':<9} {'ENGINE':<10} {'PID':>7} {'PORT':>6} {'AGE':>8}  MODEL")
    for r in rows:
        age = f"{r.age_s / 60:.0f}m" if r.age_s >= 60 else f"{r.age_s:.0f}s"
        _echo(f"{r.id:<34} {r.state:<9} {r.engine or '?':<10} {r.pid or '-':>7} {r.port or '-':>6} {age:>8}  "
              f"{r.model or '?'}")
    return 0


@click.command()
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines while the run is alive.")
@JSON_OPTION
def logs(run, follow, as_json):
    """Print (or follow) a run's server log. RUN: id, unique id prefix, or --name.

    \b
    Examples:
      servepilot logs kimi
      servepilot logs -f 20261202-1604
    """
    from pathlib import Path

    from servepilot.runs import process
    from servepilot.runs.follow import LogFollower
    from servepilot.runs.manage import identity_of, resolve_run
    from servepilot.runs.rundir import LOG_NAME

    row = resolve_run(run)
    path = Path(row["run_dir"]) / LOG_NAME
    if as_json:
        text = path.read_text(errors="replace") if path.exists() else ""
        emit_json("servepilot.logs/1", {"run_id": row["id"], "log": str(path), "lines": text.splitlines()})
        return 0
    follower = LogFollower(path)
    try:
        while True:
            text = follower.read_new()
            if text:
                sys.stdout.write(text)
                sys.stdout.flush()
            if not follow:
                break
            ident = identity_of(row)
            if not text and (ident is None or not process.group_alive(ident)):
                sys.stdout.write(follower.read_new())
                break
            time.sleep(follower.sleep_s)
    except KeyboardInterrupt:
        pass
    finally:
        follower.close()
    return 0


@click.command()
@click.argument("run")
@click.option("--grace", type=click.FloatRange(min=0), default=10.0, show_default=True, metavar="S",
              help="Seconds between SIGTERM and SIGKILL.")
@JSON_OPTION
def stop(run, grace, as_json):
    """Stop a run's own process group: SIGTERM, a grace period, then SIGKILL.

    Only the process group servepilot started is signalled, and only while its pid still
    belongs to the run (same start time); other processes are never touched.

    \b
    Examples:
      servepilot stop kimi
      servepilot stop --grace 30 20261202-1604
    """
    from servepilot.runs.manage import stop_run

    result = stop_run(run, grace_s=grace)
    if as_json:
        emit_json("servepilot.stop/1", result)
    else:
        _echo(f"{result.run_id}: {result.detail} (state {result.state})")
    return 0


@click.command()
@click.option("--model", metavar="M", help="Only attempts at this model (path or id as launched).")
@JSON_OPTION
def history(model, as_json):
    """Attempts per model: what changed from the previous attempt, and the outcome.

    \b
    Examples:
      servepilot history
      servepilot history --model /models/kimi-k2.5-nvfp4 --json
    """
    from servepilot.runs.manage import history as runs_history

    models = runs_history(model)
    if as_json:
        emit_json("servepilot.history/1", {"models": models})
        return 0
    if not models:
        _echo("no attempts recorded" + (f" for {model}" if model else ""))
        return 0
    for group in models:
        _echo(group["model"])
        for a in group["attempts"]:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(a["created_at"]))
            outcome = a["state"] + (f" ({a['category']})" if a.get("category") else "")
            _echo(f"  {when}  {a['run_id']}  {outcome}")
            for kind, change in a["changes"].items():
                _echo(f"      {kind}: {_describe_change(change)}")
    return 0


def _describe_change(change) -> str:
    if isinstance(change, list):
        return f"{change[0]} → {change[1]}"
    parts = []
    for k, v in change.get("added", {}).items():
        parts.append(f"+{k}={v}")
    for k, v in change.get("removed", {}).items():
        parts.append(f"-{k}={v}")
    for k, (a, b) in change.get("changed", {}).items():
        parts.append(f"{k}: {a} → {b}")
    return ", ".join(parts)


@click.command()
@click.option("--yes", is_flag=True, help="Remove the leftovers (default: only list them).")
@JSON_OPTION
def cleanup(yes, as_json):
    """List engine shared-memory leftovers in /dev/shm whose processes are gone; --yes removes them.

    Entries still held by a process, or too new to judge, are listed and never removed.
    Only processes this machine's PID namespace shows can be seen: inside a container that
    shares /dev/shm with others (--ipc=host, a pod's memory volume), run it on the host.

    \b
    Examples:
      servepilot cleanup
      servepilot cleanup --yes
    """
    from servepilot.runs import shm

    entries = shm.scan(shm.SHM_DIR)
    if yes:
        entries = shm.remove_leftovers(entries, shm.SHM_DIR)
    removed = sum(e.removed for e in entries)
    kept = [e for e in entries if not e.removed]
    summary = _cleanup_summary(entries, removed, yes)
    if as_json:
        emit_json("servepilot.cleanup/1", {"dir": str(shm.SHM_DIR), "entries": entries,
                                           "removed": removed, "summary": summary})
        return 0
    if not entries:
        _echo(f"no engine leftovers in {shm.SHM_DIR}")
        return 0
    for e in entries:
        done = "  removed" if e.removed else ""
        _echo(f"{e.status:<9} {human_bytes(e.size):>10}  {e.path}{done}")
        if not e.removed:
            _echo(f"{'':<21}{e.reason}")
    _echo(summary)
    leftovers = [e for e in kept if e.status == "leftover"]
    if leftovers and not yes:
        _echo(f"`servepilot cleanup --yes` removes the {len(leftovers)} leftover(s)")
    return 0


def _cleanup_summary(entries, removed: int, yes: bool) -> str:
    """One line: what was (or would be) removed, and what is kept and why in counts."""
    from collections import Counter

    if not entries:
        return "no engine leftovers: nothing to remove" if yes else "no engine leftovers"
    kept = Counter(e.status for e in entries if not e.removed)
    parts = ", ".join(f"{n} {status}" for status, n in sorted(kept.items()))
    if yes:
        if not removed:
            return f"nothing removed: no entry is a leftover ({parts}); each entry above says why it is kept"
        return f"removed {removed}" + (f"; kept {parts}" if parts else "")
    return f"{len(entries)} entries: {parts}"
