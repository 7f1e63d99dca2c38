"""One launch from start to end: signals, start, supervise, triage, record, stop on error.

The CLI used to own this sequence; now it hands over a plan and a few callbacks that
print, and gets back how the run ended. Whatever happens here (Ctrl-C, SIGTERM, a closed
terminal, a bug in supervision), the engine is never left running unwatched and
unrecorded: it is stopped, whole tree included, and the history says why.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servepilot.runs import diagnose, launch, process, tree
from servepilot.runs.launch import DEFAULT_READY_TIMEOUT_S, LaunchPlan, Outcome, Run, Supervisor

# The exit status of a process ended by SIGINT, as shells report it.
INTERRUPTED = 130


@dataclass
class LaunchEnd:
    """How `launch` ended, for the CLI to render."""

    run: Run
    code: int  # the CLI's exit code: 0, 3 (launch failed), 130 (interrupted)
    outcome: Outcome | None = None  # the start-up's outcome (None when interrupted before it)
    detached: bool = False
    exit_code: int | None = None  # the engine's, when it ran in the foreground and exited
    diagnosis: dict | None = None  # triage of a foreground engine that exited non-zero
    interrupted: str | None = None  # what the stop after Ctrl-C did


@dataclass
class Hooks:
    """What the CLI wants to hear about while the launch runs (all optional)."""

    on_started: Callable[[Run], None] | None = None
    on_event: Callable[[Any], None] | None = None
    on_ready: Callable[[Run, Outcome], None] | None = None  # before waiting in the foreground
    on_interrupt: Callable[[Run], None] | None = None


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _install_signals() -> dict:
    """SIGTERM or a closed terminal (SIGHUP) stop the run as Ctrl-C does; otherwise the
    CLI would die and leave its engine running, unrecorded."""
    return {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}


def _restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def run_launch(plan: LaunchPlan, *, name: str | None = None, detach_when_ready: bool = False,
               ready_timeout_s: float | None = None, hooks: Hooks | None = None) -> LaunchEnd:
    """Start the planned run and follow it to its end (or to ready, with `detach_when_ready`)."""
    hooks = hooks or Hooks()
    previous = _install_signals()
    try:
        run = launch.start_run(plan, name=name)
        supervisor: Supervisor | None = None
        try:
            if hooks.on_started:
                hooks.on_started(run)
            supervisor = launch.Supervisor(run, on_event=hooks.on_event,
                                    ready_timeout_s=ready_timeout_s or DEFAULT_READY_TIMEOUT_S)
            return _follow(run, supervisor, detach_when_ready, hooks)
        except KeyboardInterrupt:
            # Anywhere after the start (the progress callbacks included): the run stops.
            if hooks.on_interrupt:
                hooks.on_interrupt(run)
            detail = _stop(run, supervisor)
            launch.finish(run.run_id, "stopped", record=run.record, run_dir=run.run_dir, reason=detail)
            return LaunchEnd(run=run, code=INTERRUPTED, interrupted=detail)
        except Exception as exc:
            # A supervision that breaks must not leave its engine running, watched by nobody
            # (a --detach run that was ready is the operator's to keep: it was asked for).
            if not (detach_when_ready and run.record.get("state") == "ready"):
                _stop_after_error(run, supervisor, exc)
            raise
    finally:
        _restore_signals(previous)


def _follow(run: Run, supervisor: Supervisor, detach_when_ready: bool, hooks: Hooks) -> LaunchEnd:
    outcome = supervisor.wait_ready()
    if outcome.state != "ready":
        return LaunchEnd(run=run, code=3, outcome=outcome)
    if detach_when_ready:
        launch.detach(run)
        return LaunchEnd(run=run, code=0, outcome=outcome, detached=True)
    if hooks.on_ready:
        hooks.on_ready(run, outcome)
    code = supervisor.wait_exit()
    diagnosis = None
    if code:
        diagnosis = diagnose.triage_log(run.log_path, run.plan.command.engine)
    category = ((diagnosis or {}).get("root_cause") or {}).get("category")
    launch.finish(run.run_id, "failed" if code else "exited", exit_code=code, diagnosis=diagnosis,
           record=run.record, run_dir=run.run_dir, category=category)
    return LaunchEnd(run=run, code=3 if code else 0, outcome=outcome, exit_code=code,
                     diagnosis=diagnosis)


def _stop(run: Run, supervisor: Supervisor | None) -> str:
    try:
        if supervisor is not None:
            return supervisor.stop().detail
        return tree.stop_tree(run.identity, run_id=run.run_id, run_dir=run.run_dir).detail
    except process.NotOurProcess as refused:
        return refused.problem


def _stop_after_error(run: Run, supervisor: Supervisor | None, exc: Exception) -> None:
    detail = _stop(run, supervisor)
    launch.finish(run.run_id, "failed", record=run.record, run_dir=run.run_dir,
           reason=f"servepilot's supervision failed ({type(exc).__name__}: {exc}); {detail}",
           diagnosis={"error": f"{type(exc).__name__}: {exc}"})
