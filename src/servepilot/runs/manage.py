"""The run verbs after launch: find a run, its live state, stop it, history between attempts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servepilot.errors import BadInput
from servepilot.runs import process, rundir, store, tree
from servepilot.runs.readiness import base_url, probe

LIVE_STATES = store.LIVE_STATES


def resolve_run(ref: str) -> dict[str, Any]:
    """The run named by its id, a unique id prefix, or its --name (the newest of that name)."""
    if not ref.strip():
        raise BadInput("no run given: an empty reference would match every run", hint="`servepilot ps` lists runs")
    db = store.connect()
    try:
        rows = store.find_runs(db, ref)
    finally:
        db.close()
    if not rows:
        raise BadInput(f"no run matches {ref!r}", hint="`servepilot ps` lists runs")
    by_name = [r for r in rows if r["name"] == ref]
    if by_name:
        return by_name[-1]
    if len(rows) > 1:
        ids = ", ".join(r["id"] for r in rows[:5])
        raise BadInput(f"{ref!r} matches {len(rows)} runs ({ids}{', ...' if len(rows) > 5 else ''})",
                       hint="give more of the id")
    return rows[0]


def identity_of(row: dict[str, Any]) -> process.ProcessIdentity | None:
    pid, pgid = row.get("pid"), row.get("pgid") or row.get("pid")
    # A damaged row (pid 0 or -1 would mean "every process" to kill(2)) identifies nothing.
    if not isinstance(pid, int) or not 0 < pid < 2**22 or not isinstance(pgid, int) or not 0 < pgid < 2**22:
        return None
    if not row.get("pid_start_time"):
        return None
    return process.ProcessIdentity(row["pid"], row["pid_start_time"], row["pgid"] or row["pid"])


def run_alive(row: dict[str, Any]) -> bool:
    """Whether any process of the run lives: its group, or its tree outside the group (or,
    with no pid on record yet, any process carrying the run's marker)."""
    ident = identity_of(row)
    if ident is None:
        return bool(tree.marked(row["id"], not_before=row["created_at"] - 1.0))
    if process.group_alive(ident):
        return True
    try:
        return bool(tree.members(ident, row["id"], row.get("run_dir")))
    except process.NotOurProcess:
        return False


def supervised(row: dict[str, Any]) -> bool:
    """Whether the servepilot process that launched the run still follows it (runs
    recorded before supervisors were, count as followed: nothing is known of them)."""
    if not row.get("supervisor_pid"):
        return True
    return process.is_same_process(row.get("supervisor_pid"), row.get("supervisor_start_time"))


def live_state(row: dict[str, Any], db=None) -> str:
    """The run's state checked against its processes and its supervisor.

    A run recorded as starting or ready whose processes are all gone has exited (its pid
    now belonging to another process counts as gone). When its supervisor died too (killed
    while the engine loaded), nobody will record the end, so this does: an engine that
    answers /health is ready; a dead one is failed when its log shows a root cause, else
    lost (its end was not seen).
    """
    state = row["state"]
    if state not in LIVE_STATES:
        return state
    if state == "starting" and identity_of(row) is None and supervised(row):
        return state  # between the history row and the pid: its supervisor is still writing
    alive = run_alive(row)
    if state == "starting" and not supervised(row):
        return _unsupervised(row, alive, db)
    if alive:
        return state
    if db is not None:
        store.update_run(db, row["id"], only_if_state=LIVE_STATES, state="exited", ended_at=time.time())
    return "exited"


def _unsupervised(row: dict[str, Any], alive: bool, db) -> str:
    if alive:
        if row.get("port") and probe(base_url(row.get("host"), row["port"])).ready:
            if db is not None:
                store.update_run(db, row["id"], only_if_state=("starting",), state="ready", ready_at=time.time(),
                                 note="ready (found by ps: its supervisor had gone)")
            return "ready"
        return "starting"
    # Imported here: triage (~0.1 s) is needed only for this rare case, and `ps` stays quick.
    from servepilot.runs import diagnose

    log = Path(row["run_dir"]) / rundir.LOG_NAME
    diagnosis = diagnose.triage_log(log, row.get("engine")) if log.is_file() else {}
    category = (diagnosis.get("root_cause") or {}).get("category")
    state = "failed" if category else store.LOST
    if db is not None:
        store.update_run(db, row["id"], only_if_state=("starting",), state=state, ended_at=time.time(),
                         category=category, diagnosis_json=diagnosis,
                         note="its supervisor had gone; the end was found by ps")
    return state


@dataclass(frozen=True)
class RunRow:
    """One line of `ps`."""

    id: str  # kept for old readers of `ps --json`; run_id is the name `launch --json` uses
    name: str | None
    state: str
    engine: str | None
    model: str | None
    pid: int | None
    port: int | None
    created_at: float
    age_s: float
    served_model: str | None
    category: str | None
    exit_code: int | None
    run_dir: str
    run_id: str = ""
    supervised: bool = False
    note: str | None = None


def list_runs(limit: int | None = None) -> list[RunRow]:
    """The newest `limit` runs (all when None), oldest first, states checked live."""
    db = store.connect()
    try:
        rows = store.list_runs(db, limit=limit)
        out = []
        now = time.time()
        for r in rows:
            state = live_state(r, db)
            out.append(RunRow(
                id=_clip(r["id"]), name=_clip(r["name"]), state=_clip(state), engine=_clip(r["engine"]),
                model=_clip(r["model"]),
                pid=r["pid"], port=r["port"], created_at=r["created_at"], age_s=round(now - r["created_at"], 1),
                served_model=r.get("served_model"), category=r.get("category"), exit_code=r.get("exit_code"),
                run_dir=_clip(r["run_dir"]), run_id=_clip(r["id"]),
                supervised=state in LIVE_STATES and supervised(r),
                note=_note(r, state),
            ))
        return out
    finally:
        db.close()


# Ids and names servepilot writes are at most ~90 characters and models are paths; longer
# text in the history came from elsewhere (a damaged or hand-edited database) and is cut so
# that one row cannot flood `ps`.
MAX_FIELD = 1024


def _clip(value):
    if isinstance(value, str) and len(value) > MAX_FIELD:
        return value[:MAX_FIELD] + f"... ({len(value):,} characters)"
    return value


def _note(row: dict[str, Any], state: str) -> str | None:
    if state == "starting" and not supervised(row):
        return "its supervisor has gone: nobody follows this start; `servepilot stop` ends it"
    return row.get("note")


@dataclass(frozen=True)
class StopOutcome:
    run_id: str
    state: str
    detail: str
    killed: bool = False
    survivors: list[int] = field(default_factory=list)  # pids still alive after SIGKILL


def stop_run(ref: str, grace_s: float = 10.0) -> StopOutcome:
    """Stop a run's own process group (SIGTERM, `grace_s`, SIGKILL) and record it.

    The state is written *before* the signal: a supervisor following the run in another
    shell sees the exit moments later and must find it recorded as stopped, not failed.
    """
    row = resolve_run(ref)
    ident = identity_of(row)
    if ident is None:
        return _stop_unrecorded(row, grace_s)
    group = process.verify_ours(ident)  # raises NotOurProcess on a recycled pid
    members = tree.members(ident, row["id"], row["run_dir"], group=group)
    db = store.connect()
    try:
        previous = row["state"]
        if members:
            store.update_run(db, row["id"], only_if_state=(*LIVE_STATES, "exited"), state="stopped",
                             ended_at=time.time())
        try:
            result = tree.stop_tree(ident, run_id=row["id"], run_dir=row["run_dir"], grace_s=grace_s)
        except BaseException:
            if members:  # nothing was signalled after all: put the state back
                store.update_run(db, row["id"], only_if_state=("stopped",), state=previous, ended_at=None)
            raise
        if members and not result.signalled:  # it exited on its own in between
            store.update_run(db, row["id"], only_if_state=("stopped",), state=previous, ended_at=None)
        state = store.get_run(db, row["id"])["state"]
        if not result.signalled:
            state = live_state({**row, "state": state}, db)
    finally:
        db.close()
    if result.signalled:
        record = rundir.read_record(Path(row["run_dir"]))
        if record is not None:
            record.update(state=state, ended_at=time.time(), stop=result.detail)
            rundir.write_record(Path(row["run_dir"]), record)
    return StopOutcome(row["id"], state, result.detail, result.killed, list(result.survivors))


def _stop_unrecorded(row: dict[str, Any], grace_s: float) -> StopOutcome:
    """A run without a pid on record: its supervisor died before writing it, or it never
    started a process. The marker tells which."""
    result = tree.stop_marked(row["id"], not_before=row["created_at"] - 1.0, grace_s=grace_s)
    if not result.signalled:
        return StopOutcome(row["id"], row["state"], "the run never started a process")
    db = store.connect()
    try:
        store.update_run(db, row["id"], only_if_state=(*LIVE_STATES, "exited", store.LOST), state="stopped",
                         ended_at=time.time(), note=result.detail)
        state = store.get_run(db, row["id"])["state"]
    finally:
        db.close()
    return StopOutcome(row["id"], state, result.detail, result.killed, list(result.survivors))


# -- history ------------------------------------------------------------------------------


def _dict_diff(old: dict | None, new: dict | None) -> dict[str, Any]:
    old, new = old or {}, new or {}
    added = {k: new[k] for k in new if k not in old}
    removed = {k: old[k] for k in old if k not in new}
    changed = {k: [old[k], new[k]] for k in new if k in old and old[k] != new[k]}
    return {k: v for k, v in (("added", added), ("removed", removed), ("changed", changed)) if v}


def attempt_changes(prev: dict | None, cur: dict) -> dict[str, Any]:
    """What differs between two attempts at the same model (empty for the first)."""
    if prev is None:
        return {}
    changes: dict[str, Any] = {}
    flags = _dict_diff(prev.get("options_json"), cur.get("options_json"))
    if flags:
        changes["flags"] = flags
    env = _dict_diff(prev.get("env_json"), cur.get("env_json"))
    if env:
        changes["env"] = env
    for key in ("overlay", "engine_version", "engine", "gpu_key"):
        if prev.get(key) != cur.get(key):
            changes[key] = [prev.get(key), cur.get(key)]
    return changes


def history(model: str | None = None) -> list[dict[str, Any]]:
    """Attempts grouped by model, oldest first, each with what changed and how it ended."""
    db = store.connect()
    try:
        rows = store.list_runs(db, model=model)
        groups: dict[str, list[dict]] = {}
        for r in rows:
            r["state"] = live_state(r, db)
            # An overlay of a checkpoint is another attempt at the same model.
            groups.setdefault(r.get("model_key") or r["model"] or "?", []).append(r)
    finally:
        db.close()
    out = []
    for m, runs in groups.items():
        attempts = []
        prev = None
        for r in runs:
            diag = r.get("diagnosis_json") or {}
            root = diag.get("root_cause") or {}
            attempts.append({
                "run_id": _clip(r["id"]),
                "name": _clip(r["name"]),
                "created_at": r["created_at"],
                "engine": r["engine"],
                "engine_version": r["engine_version"],
                "state": _clip(r["state"]),
                "exit_code": r["exit_code"],
                "category": r.get("category"),
                "cause": root.get("message") or root.get("excerpt") or diag.get("error"),
                "check_verdict": r.get("check_verdict"),
                "changes": attempt_changes(prev, r),
            })
            prev = r
        out.append({"model": m, "attempts": attempts})
    return out
