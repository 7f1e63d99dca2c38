"""Launch an engine under supervision: plan, start, follow, probe, diagnose, record.

Plan first (STYLE.md habit 3): `prepare_launch` reads the command, refuses what launch
cannot do (an ssh-wrapped command), runs check and the planner, and returns a frozen
`LaunchPlan` that the CLI shows or refuses. `start_run` then makes the run directory and
starts the process; `Supervisor.wait_ready` follows it until it serves or fails.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servepilot.errors import BadInput
from servepilot.jsonable import to_jsonable
from servepilot.runs import diagnose, environment, integration, process, rundir, store, tree
from servepilot.runs.follow import LogFollower
from servepilot.runs.phases import Event, PhaseTracker, default_port
from servepilot.runs.readiness import Probe, base_url, probe

# An engine that printed a fatal line usually exits by itself within seconds (vLLM tears
# down its workers); if it has not after this long it is hung (the story's multi-process
# hang) and servepilot stops its group.
FATAL_SETTLE_S = 5.0
# Probing costs a TCP connect and two requests; twice a second is plenty next to start-up
# times of seconds to minutes.
PROBE_INTERVAL_S = 0.5
# Large checkpoints take ten minutes or more to load (the story: 540 GB); half an hour
# before calling a start hung.
DEFAULT_READY_TIMEOUT_S = 1800.0
DEFAULT_STOP_GRACE_S = 10.0
# How often the supervisor notes the engine's descendants: workers start once, early; a
# /proc walk twice a second costs a few milliseconds.
SNAPSHOT_INTERVAL_S = 0.5


@dataclass(frozen=True)
class LaunchPlan:
    """Everything decided before a process starts."""

    command: integration.LaunchCommand
    check: Any = field(default=None, metadata={"json": False})
    plan: Any = field(default=None, metadata={"json": False})
    notes: tuple[str, ...] = ()

    @property
    def predicted_failure(self) -> bool:
        return self.check is not None and getattr(self.check, "verdict", None) == "fail"

    @property
    def port(self) -> int | None:
        return self.command.port or default_port(self.command.engine, self.command.program)


def prepare_launch(command: list[str], *, gpu: str | None = None, engine_version: str | None = None,
                   command_file: str | None = None, force: bool = False, ask_engine: bool = False,
                   engine_python: str | None = None) -> LaunchPlan:
    """Read the command and predict its outcome; nothing is started.

    A command servepilot cannot understand is refused (fail closed) unless `force`, in
    which case it is read with the minimal shell split and launched without a check.
    """
    cmd = integration.build_launch_command(command, gpu, engine_version, command_file, force=force)
    if cmd.ssh_host:
        raise BadInput(
            f"the command runs on {cmd.ssh_host} over ssh; servepilot launch starts engines on this machine only",
            hint="run `servepilot launch -- ...` on that host itself",
        )
    if not cmd.argv:
        raise BadInput("no engine command to run", hint="servepilot launch -- vllm serve MODEL ...")
    notes = list(cmd.notes)
    if cmd.dropped:
        notes.append(
            "servepilot owns the log and the process: dropped from the command: " + ", ".join(cmd.dropped)
        )
    check, note = integration.run_check(cmd, force=force)
    if note:
        notes.append(note)
    if check is not None and (ask_engine or engine_python) and cmd.deployment is not None:
        # the engine's own answer before it starts for real (check --ask-engine's preflight)
        from servepilot.checks import engine_answer

        check = engine_answer.with_engine_answer(check, engine_answer.ask_for(cmd.deployment, python=engine_python))
    plan, note = integration.plan(cmd, check)
    if note:
        notes.append(note)
    return LaunchPlan(command=cmd, check=check, plan=plan, notes=tuple(notes))


@dataclass
class Run:
    """A started attempt: its record on disk and in the history, and its live process."""

    run_id: str
    run_dir: Path
    identity: process.ProcessIdentity
    plan: LaunchPlan
    record: dict[str, Any]
    proc: Any = None  # subprocess.Popen while this process is the engine's parent

    @property
    def log_path(self) -> Path:
        return self.run_dir / rundir.LOG_NAME


def _command_text(cmd: integration.LaunchCommand, env_diff: dict[str, str | None]) -> str:
    assigns = [f"{k}={shlex.quote(v)}" for k, v in env_diff.items() if v is not None]
    return " ".join([*assigns, shlex.join(environment.redact_argv(cmd.argv))]) + "\n"


def start_run(plan: LaunchPlan, *, name: str | None = None, cwd: str | Path | None = None) -> Run:
    """Create the run directory and history row, then start the engine in its own session."""
    cmd = plan.command
    cwd = str(Path(cwd or getattr(cmd, "cwd", None) or os.getcwd()).resolve())
    parent_env = dict(os.environ)
    child_env = environment.run_environment(parent_env, cmd.env)
    env_diff = environment.environment_diff(parent_env, child_env)
    seen_env = environment.engine_environment(parent_env, child_env)
    secrets = environment.secret_values(cmd.argv, child_env)
    # The history first: a state directory or database that cannot be used is reported
    # before anything is written (no orphan run directory).
    db = store.connect()
    try:
        run_id, run_dir = rundir.create_run_dir(name)
        try:
            (run_dir / rundir.COMMAND_NAME).write_text(_command_text(cmd, env_diff))
        except OSError as exc:
            rundir.remove_empty_run_dir(run_dir)
            raise BadInput(f"cannot write the run's files ({exc.strerror})", path=run_dir,
                           hint="free space in the state directory or set SERVEPILOT_HOME") from None
    except BaseException:
        db.close()
        raise
    # Every descendant inherits this (unless it clears its environment): how `stop` finds
    # a worker that left the process group (runs/tree.py).
    child_env[tree.RUN_MARKER] = run_id
    me = process.self_identity()
    record: dict[str, Any] = {
        "id": run_id,
        "name": name,
        "created_at": time.time(),
        "run_dir": str(run_dir),
        "log": str(run_dir / rundir.LOG_NAME),
        "engine": cmd.engine,
        "engine_version": cmd.engine_version,
        "model": cmd.model,
        "argv": environment.redact_argv(cmd.argv),
        "env": seen_env,
        "cwd": cwd,
        "host": cmd.host,
        "port": plan.port,
        "gpus": list(cmd.gpus),
        "gpu_key": cmd.gpu_key,
        # shell words not run (`export HF_TOKEN=...;` before the engine), and the notes that
        # list them: scrubbed of what argv and env redact
        "dropped": environment.scrub(list(cmd.dropped), secrets),
        "notes": environment.scrub(list(plan.notes), secrets),
        "overlay": integration.overlay_of(cmd.model),
        "check": to_jsonable(plan.check) if plan.check is not None else None,
        "plan": to_jsonable(plan.plan) if plan.plan is not None else None,
        "state": "starting",
    }
    try:
        store.insert_run(
            db, id=run_id, name=name, created_at=record["created_at"], run_dir=str(run_dir),
            engine=cmd.engine, engine_version=cmd.engine_version, model=cmd.model,
            argv_json=record["argv"], env_json=seen_env, cwd=cwd, host=cmd.host, port=plan.port,
            state="starting", check_verdict=getattr(plan.check, "verdict", None),
            supervisor_pid=me.pid, supervisor_start_time=me.start_time,
            options_json=_flags(record["argv"]), overlay=_overlay_key(record["overlay"]),
            gpu_key=cmd.gpu_key, gpus_json=list(cmd.gpus),
            model_key=(record["overlay"] or {}).get("original") or cmd.model,
        )
        log_fd = rundir.open_log_exclusive(run_dir)
        try:
            proc, identity = process.spawn(cmd.argv, env=child_env, cwd=cwd, log_fd=log_fd)
        except BaseException as exc:
            store.update_run(db, run_id, state="failed", ended_at=time.time(),
                             diagnosis_json={"error": str(exc)})
            record.update(state="failed", error=str(exc))
            _write_record_quietly(run_dir, record)
            raise
        finally:
            os.close(log_fd)  # the child holds its own copy; we read through the path
        record.update(pid=identity.pid, pid_start_time=identity.start_time, pgid=identity.pgid)
        try:
            store.update_run(db, run_id, pid=identity.pid, pid_start_time=identity.start_time, pgid=identity.pgid)
        except BaseException:
            # Ctrl-C or a locked database before the pid is on record: no later `stop`
            # could find this engine, so it must not outlive the failed start.
            _stop_unrecorded(proc, identity, run_id, run_dir)
            raise
    finally:
        db.close()
    _write_record_quietly(run_dir, record)
    return Run(run_id=run_id, run_dir=run_dir, identity=identity, plan=plan, record=record, proc=proc)


def _write_record_quietly(run_dir: Path, record: dict[str, Any]) -> bool:
    """Write run.json; a full disk leaves the previous copy (and the history row, which is
    the record of truth) intact instead of breaking the supervision of a live engine."""
    try:
        rundir.write_record(run_dir, record)
        return True
    except OSError:
        return False


def _stop_unrecorded(proc, identity: process.ProcessIdentity, run_id: str, run_dir: Path) -> None:
    try:
        tree.stop_tree(identity, run_id=run_id, run_dir=run_dir, grace_s=DEFAULT_STOP_GRACE_S)
    except process.NotOurProcess:
        pass
    finally:
        proc.poll()  # reap it if it is gone, so no zombie is left behind


def _flags(argv: list[str]) -> dict[str, str]:
    """The operator's flags as {name: value} for history's diff (positional model aside)."""
    return integration.flag_values(list(argv))


def _overlay_key(overlay: dict | None) -> str | None:
    if not overlay:
        return None
    return f"{overlay.get('dir')} (patches {overlay.get('patches_hash', '?')[:12]} of {overlay.get('original', '?')})"


@dataclass(frozen=True)
class Outcome:
    """How a supervised start ended."""

    run_id: str
    state: str  # "ready" | "failed" | "stopped" (by `servepilot stop` from elsewhere)
    elapsed_s: float
    url: str | None = None
    served_models: tuple[str, ...] = ()
    figures: dict = field(default_factory=dict)
    exit_code: int | None = None
    reason: str | None = None  # "exited with code 1", "fatal line", "not ready after 1800 s", ...
    diagnosis: dict | None = None
    predicted: dict | None = None  # the planner's kv_tokens / max_concurrency beside `figures`
    exited_at: float | None = None  # time.time() when the exit was noticed (bench: diagnosis latency)


class Supervisor:
    """Follow one run from start to ready (or failure) and record what happened."""

    def __init__(self, run: Run, *, on_event: Callable[[Event], None] | None = None,
                 ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S):
        self.run = run
        self.on_event = on_event or (lambda e: None)
        self.ready_timeout_s = ready_timeout_s
        self.tracker = PhaseTracker(run.plan.command.engine)
        self.follower = LogFollower(run.log_path)
        self.tree = tree.TreeLog(run.run_dir)
        self._next_snapshot = 0.0
        # What the record redacts, to scrub from triage's excerpts of the log too (vLLM
        # logs its non-default args, --api-key included).
        cmd = run.plan.command
        self._secrets = environment.secret_values(cmd.argv, {**os.environ, **cmd.env})
        self._exited = threading.Event()
        self._exit_code: int | None = None
        self._exit_time: float | None = None
        if run.proc is not None:
            threading.Thread(target=self._reap, name=f"reap-{run.identity.pid}", daemon=True).start()
        # Engines take seconds to minutes to start; meanwhile get triage ready for a failure.
        threading.Thread(target=diagnose.warm_triage, name="warm-triage", daemon=True).start()

    def _reap(self) -> None:
        self._exit_code = self.run.proc.wait()
        self._exit_time = time.time()
        self._exited.set()

    def _alive(self) -> bool:
        if self.run.proc is not None and not self._exited.is_set():
            return True
        if self.run.proc is not None and self._exit_code not in (0, None):
            return False  # a failed leader fails the run; _failed stops what it left
        # Exited with 0, or not our child: the run lives while its group, or a process of
        # its tree outside the group, does (a launcher script that backgrounds the server).
        return process.group_alive(self.run.identity) or bool(self._members())

    def _members(self) -> list[tree.Member]:
        return tree.members(self.run.identity, self.run.run_id, self.run.run_dir)

    def _snapshot(self) -> None:
        """Note the engine's descendants now and then (a cheap /proc walk), so that a worker
        that later leaves the group is still known to be the run's."""
        now = time.monotonic()
        if now >= self._next_snapshot:
            self._next_snapshot = now + SNAPSHOT_INTERVAL_S
            self.tree.record(self.run.identity)

    def stop(self) -> process.StopResult:
        return tree.stop_tree(self.run.identity, run_id=self.run.run_id, run_dir=self.run.run_dir,
                              grace_s=DEFAULT_STOP_GRACE_S)

    def _pump(self) -> None:
        text = self.follower.read_new()
        if text:
            for event in self.tracker.feed(text):
                self.on_event(event)

    def wait_ready(self) -> Outcome:
        started = time.monotonic()
        port = self.run.plan.port
        url = base_url(self.run.plan.command.host, port) if port else None
        next_probe = 0.0
        fatal_since: float | None = None
        try:
            while True:
                self._pump()
                self._snapshot()
                if not self._alive():
                    self._pump()  # the last lines, written just before the exit
                    return self._failed(started, reason=None)
                now = time.monotonic()
                if self.tracker.fatal_line and fatal_since is None:
                    fatal_since = now
                if fatal_since is not None and now - fatal_since > FATAL_SETTLE_S:
                    self.stop()
                    return self._failed(started, reason=f"fatal line, then no exit for {FATAL_SETTLE_S:g} s: stopped")
                if now - started > self.ready_timeout_s:
                    self.stop()
                    return self._failed(started, reason=f"not ready after {self.ready_timeout_s:g} s: stopped")
                if url and fatal_since is None and (now >= next_probe or self.tracker.server_hint):
                    self.tracker.server_hint = False
                    next_probe = now + PROBE_INTERVAL_S
                    result = self._probe(url, port)
                    if result is not None and result.ready and self._alive():
                        return self._ready(started, url, result)
                if self.run.proc is not None and not self._exited.is_set():
                    self._exited.wait(self.follower.sleep_s)  # wakes at once on exit
                else:
                    time.sleep(self.follower.sleep_s)
        finally:
            self.follower.close()

    def _probe(self, url: str, port: int) -> Probe | None:
        # Only ask once our own process tree listens on the port: otherwise a different
        # server already on that port (the port-in-use failure) would look ready.
        ports = process.listening_ports(self.run.identity)
        if ports is not None and port not in ports:
            return None
        return probe(url)  # listening (or unknowable: then the probe alone decides)

    def _learned_version(self) -> dict[str, str]:
        """The engine version the log printed, when the command did not tell us."""
        logged = self.tracker.figures.get("engine_version")
        if logged and not self.run.plan.command.engine_version:
            self.run.record["engine_version"] = logged
            return {"engine_version": logged}
        return {}

    def _ready(self, started: float, url: str, result: Probe) -> Outcome:
        figures = dict(self.tracker.figures)
        opts = self.run.plan.command.options or {}
        tp = opts.get("tensor_parallel_size") or opts.get("tensor-parallel-size") or opts.get("tp")
        if tp is not None and "tp" not in figures:
            try:
                figures["tp"] = int(tp)
            except (TypeError, ValueError):
                pass
        resolved = getattr(self.run.plan.check, "resolved", None)
        kv_dtype = resolved.get("kv_cache_dtype") if isinstance(resolved,
                                                                dict) else getattr(resolved, "kv_cache_dtype", None)
        if kv_dtype and "kv_cache_dtype" not in figures:
            figures["kv_cache_dtype"] = str(kv_dtype)
        outcome = Outcome(
            run_id=self.run.run_id, state="ready", elapsed_s=time.monotonic() - started, url=url,
            served_models=result.served_models, figures=figures, predicted=_predicted(self.run.plan.plan),
        )
        cmd = self.run.plan.command
        db = store.connect()
        try:
            store.update_run(db, self.run.run_id, only_if_state=("starting",), state="ready", ready_at=time.time(),
                             served_model=", ".join(result.served_models) or None, **self._learned_version())
            if any(figures.get(k) is not None for k in store.MEASUREMENT_FIELDS):
                store.record_measurement(db, self.run.run_id, model=cmd.model, engine=cmd.engine,
                                         gpu_key=cmd.gpu_key, figures=figures)
        finally:
            db.close()
        self.run.record.update(state="ready", ready_at=time.time(), url=url,
                               served_models=list(result.served_models), figures=figures)
        _write_record_quietly(self.run.run_dir, self.run.record)
        return outcome

    def _failed(self, started: float, reason: str | None) -> Outcome:
        if self.run.proc is not None:
            self._exited.wait(2.0)  # after a stop: let the reaper collect the exit code
        exited_at = self._exit_time or time.time()
        code = self._exit_code
        if reason is None:
            reason = f"exited with code {code}" if code is not None else "the process exited"
            # Workers the failed leader left behind would hold the GPU memory the next
            # attempt needs (vLLM's orphaned workers); they are the run's own group.
            try:
                process.verify_ours(self.run.identity)
                leftovers = self._members()
            except process.NotOurProcess:
                leftovers = []
            if leftovers:
                stopped = self.stop()
                reason += f"; stopped the {len(leftovers)} process(es) it left behind ({stopped.detail})"
        diagnosis = environment.scrub(diagnose.triage_log(self.run.log_path, self.run.plan.command.engine),
                                      self._secrets)
        category = (diagnosis.get("root_cause") or {}).get("category")
        state = "failed"
        recorded = finish(self.run.run_id, "failed", exit_code=code, category=category, diagnosis=diagnosis,
                          record=self.run.record, run_dir=self.run.run_dir, reason=reason, **self._learned_version())
        if not recorded:
            # Someone else recorded the end first: `servepilot stop` from another shell.
            state, reason = "stopped", "stopped by `servepilot stop` before it was ready"
        return Outcome(
            run_id=self.run.run_id, state=state, elapsed_s=time.monotonic() - started, exit_code=code,
            reason=reason, diagnosis=diagnosis, figures=dict(self.tracker.figures), exited_at=exited_at,
            predicted=_predicted(self.run.plan.plan),
        )

    def wait_exit(self) -> int | None:
        """Foreground after ready: block until the engine exits; returns its exit code."""
        while self.run.proc is not None and not self._exited.wait(SNAPSHOT_INTERVAL_S):
            self._snapshot()
        if self.run.proc is not None and self._exit_code != 0:
            return self._exit_code
        while self._alive():
            self._snapshot()
            time.sleep(SNAPSHOT_INTERVAL_S)
        return None


def _predicted(plan: Any) -> dict | None:
    if plan is None:
        return None
    get = plan.get if isinstance(plan, dict) else lambda k: getattr(plan, k, None)
    return {k: get(k) for k in ("kv_tokens", "max_concurrency")}


def finish(run_id: str, state: str, *, exit_code: int | None = None, category: str | None = None,
           diagnosis: dict | None = None, record: dict | None = None, run_dir: Path | None = None,
           reason: str | None = None, **extra: Any) -> bool:
    """Record how a run ended, unless someone (a `stop`) already recorded it."""
    db = store.connect()
    try:
        changed = store.update_run(
            db, run_id, only_if_state=(*store.LIVE_STATES, "exited"), state=state, exit_code=exit_code,
            ended_at=time.time(), category=category, diagnosis_json=diagnosis, **extra,
        )
    finally:
        db.close()
    if changed and record is not None and run_dir is not None:
        record.update(state=state, exit_code=exit_code, ended_at=time.time(), reason=reason,
                      diagnosis=diagnosis)
        _write_record_quietly(run_dir, record)
    return changed


# Popen objects of engines left running by --detach. Kept referenced so the interpreter
# never finalises them mid-run (Popen.__del__ would warn that the child is still running);
# the engine is in its own session and outlives this process regardless.
_DETACHED: list[Any] = []


def detach(run: Run) -> None:
    if run.proc is not None:
        _DETACHED.append(run.proc)
