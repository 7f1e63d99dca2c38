"""The run history: one SQLite database in the state directory.

Schema changes are named, ordered migration functions recorded in `_migrations` (the shape
of simonw/llm's migrations.py). WAL mode plus a busy timeout let several servepilot commands
(a detached launch finishing, `ps` and `stop` from other shells) use the database at once:
readers never block the writer, and a writer waits up to BUSY_TIMEOUT_MS for another.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servepilot import settings
from servepilot.errors import BadInput

if TYPE_CHECKING:  # sqlite3 loads when the history is opened: `check` without one skips it
    import sqlite3

# 10 s: a migration or a run update holds the write lock for milliseconds; ten seconds
# covers a slow disk without letting a wedged process hang the CLI forever.
BUSY_TIMEOUT_MS = 10_000
DB_NAME = "history.sqlite3"

# States of a run whose process is (as far as the record knows) alive.
LIVE_STATES = ("starting", "ready")
# A run whose supervisor died before the engine's end was seen: nobody recorded how it ended
# and its log shows no error.
LOST = "lost"

Migration = Callable[["sqlite3.Connection"], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register `fn` as the next migration; its name is its identity forever."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_runs(db: sqlite3.Connection) -> None:
    db.execute(
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            name TEXT,
            created_at REAL NOT NULL,
            run_dir TEXT NOT NULL,
            engine TEXT,
            engine_version TEXT,
            model TEXT,
            argv_json TEXT NOT NULL,
            env_json TEXT NOT NULL,
            cwd TEXT,
            host TEXT,
            port INTEGER,
            pid INTEGER,
            pid_start_time REAL,
            pgid INTEGER,
            state TEXT NOT NULL,
            exit_code INTEGER,
            ended_at REAL,
            check_verdict TEXT
        )
        """
    )
    db.execute("CREATE INDEX runs_created ON runs(created_at)")


@migration
def m002_runs_outcome(db: sqlite3.Connection) -> None:
    # What history compares between attempts, and how each attempt ended.
    for column in (
        "ready_at REAL",
        "served_model TEXT",
        "category TEXT",
        "diagnosis_json TEXT",
        "options_json TEXT",
        "overlay TEXT",
        "gpu_key TEXT",
        "gpus_json TEXT",
        "model_key TEXT",  # the overlay's original checkpoint, else the model: history's grouping
    ):
        db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
    db.execute("CREATE INDEX runs_model ON runs(model)")
    db.execute("CREATE INDEX runs_name ON runs(name)")


@migration
def m003_measurements(db: sqlite3.Connection) -> None:
    # The figures an engine printed about itself, for the planner to learn from.
    db.execute(
        """
        CREATE TABLE measurements (
            run_id TEXT PRIMARY KEY REFERENCES runs(id),
            measured_at REAL NOT NULL,
            model TEXT,
            engine TEXT,
            gpu_key TEXT,
            available_kv_bytes INTEGER,
            kv_tokens INTEGER,
            weights_bytes INTEGER,
            max_concurrency REAL,
            max_model_len INTEGER,
            tp INTEGER,
            kv_cache_dtype TEXT
        )
        """
    )
    db.execute("CREATE INDEX measurements_key ON measurements(model, engine, gpu_key)")


@migration
def m004_supervisor(db: sqlite3.Connection) -> None:
    # Who follows the run: a `ps` that finds this process gone knows that nobody will record
    # the run's end and looks at the engine itself (pid, /health, its log).
    db.execute("ALTER TABLE runs ADD COLUMN supervisor_pid INTEGER")
    db.execute("ALTER TABLE runs ADD COLUMN supervisor_start_time REAL")
    db.execute("ALTER TABLE runs ADD COLUMN note TEXT")


def db_path() -> Path:
    return settings.state_dir() / DB_NAME


def connect(path: Path | None = None) -> sqlite3.Connection:
    """Open the history (creating and migrating it) with WAL and a busy timeout.

    BadInput naming the file when the state directory is not a directory or the history is
    not a database: servepilot reports it and changes nothing, so the operator can move it aside.
    """
    import sqlite3

    path = path or db_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot use the state directory ({exc.strerror})", path=path.parent,
                       hint="set SERVEPILOT_HOME to a directory") from None
    try:
        return _open_patiently(path)
    except sqlite3.DatabaseError as exc:
        raise BadInput(f"the run history cannot be opened ({exc})", path=path,
                       hint="move it aside to start a new history, or set SERVEPILOT_HOME") from None


def _open_patiently(path: Path) -> sqlite3.Connection:
    # SQLite answers "database is locked" at once, without its busy handler, in a few moments
    # of a WAL database's life: while another connection switches it to WAL, runs recovery of
    # the wal-index, or, as the last one to close, checkpoints and removes the -wal/-shm files.
    # Two launches started together meet exactly there (found by the port-race fault test
    # under load), so opening is retried for as long as a busy write would be waited for.
    import sqlite3

    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.01
    while True:
        try:
            return _open(path)
        except sqlite3.OperationalError as exc:
            transient = "locked" in str(exc) or "busy" in str(exc)
            if not transient or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def _open(path: Path) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE ourselves so that a read-then-write
    # (migrations, state updates) takes the write lock up front instead of failing to
    # upgrade a read lock later with SQLITE_BUSY.
    import sqlite3

    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA foreign_keys = ON")
        migrate(db)
    except BaseException:
        db.close()
        raise
    return db


@contextmanager
def write(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One short write transaction, holding the write lock from its first statement."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def migrate(db: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet recorded; return their names. Safe to race."""
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    wanted = {name for name, _ in MIGRATIONS}
    if wanted <= {row[0] for row in db.execute("SELECT name FROM _migrations")}:
        return []  # the common case: no write lock taken, so readers never queue behind writers
    applied_now: list[str] = []
    with write(db):
        done = {row[0] for row in db.execute("SELECT name FROM _migrations")}
        for name, fn in MIGRATIONS:
            if name in done:
                continue
            fn(db)
            db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
            applied_now.append(name)
    return applied_now


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row["name"] for row in db.execute(f"PRAGMA table_info({table})")]


# -- runs -------------------------------------------------------------------------------

_JSON_COLUMNS = {"argv_json", "env_json", "diagnosis_json", "options_json", "gpus_json"}


def _encode(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (json.dumps(v) if k in _JSON_COLUMNS and v is not None else v) for k, v in values.items()}


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for k in _JSON_COLUMNS:
        if out.get(k) is not None:
            try:
                out[k] = json.loads(out[k])
            except (ValueError, TypeError, RecursionError):
                # A damaged cell (another tool, a torn disk) must not take `ps` down with it.
                out[k] = None
    return out


def insert_run(db: sqlite3.Connection, **values: Any) -> None:
    values = _encode(values)
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    with write(db):
        db.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", tuple(values.values()))


def update_run(db: sqlite3.Connection, run_id: str, *, only_if_state: tuple[str, ...] = (), **values: Any) -> bool:
    """Set columns of one run; with `only_if_state`, only while its state is one of those.

    The guard keeps a late writer (a `ps` noticing a dead pid) from overwriting an outcome
    that the supervisor recorded a moment earlier. Returns whether a row changed.
    """
    values = _encode(values)
    sets = ", ".join(f"{k} = ?" for k in values)
    sql = f"UPDATE runs SET {sets} WHERE id = ?"
    params: list[Any] = [*values.values(), run_id]
    if only_if_state:
        sql += f" AND state IN ({', '.join('?' for _ in only_if_state)})"
        params.extend(only_if_state)
    with write(db):
        return db.execute(sql, params).rowcount > 0


def get_run(db: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    return _decode(row) if row else None


def list_runs(db: sqlite3.Connection, *, model: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Runs oldest first (the order history reads attempts in)."""
    sql = "SELECT * FROM runs"
    params: list[Any] = []
    if model is not None:
        sql += " WHERE model = ? OR model_key = ?"
        params.extend([model, model])
    sql += " ORDER BY created_at, id"
    rows = [_decode(r) for r in db.execute(sql, params)]
    return rows[-limit:] if limit else rows


def find_runs(db: sqlite3.Connection, ref: str) -> list[dict[str, Any]]:
    """Runs whose id is `ref`, starts with `ref`, or whose --name is `ref`."""
    exact = db.execute("SELECT * FROM runs WHERE id = ?", (ref,)).fetchall()
    if exact:
        return [_decode(r) for r in exact]
    like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = db.execute(
        "SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\' OR name = ? ORDER BY created_at",
        (like, ref),
    ).fetchall()
    # LIKE ignores ASCII case; run ids and names are case-sensitive.
    return [_decode(r) for r in rows if r["id"].startswith(ref) or r["name"] == ref]


# -- measurements -----------------------------------------------------------------------

MEASUREMENT_FIELDS = (
    "available_kv_bytes",
    "kv_tokens",
    "weights_bytes",
    "max_concurrency",
    "max_model_len",
    "tp",
    "kv_cache_dtype",
)


def record_measurement(db: sqlite3.Connection, run_id: str, *, model: str | None, engine: str | None,
                       gpu_key: str | None, figures: dict[str, Any]) -> None:
    row = {k: figures.get(k) for k in MEASUREMENT_FIELDS}
    with write(db):
        db.execute(
            "INSERT OR REPLACE INTO measurements (run_id, measured_at, model, engine, gpu_key, "
            + ", ".join(MEASUREMENT_FIELDS)
            + ") VALUES (?, ?, ?, ?, ?"
            + ", ?" * len(MEASUREMENT_FIELDS)
            + ")",
            (run_id, time.time(), model, engine, gpu_key, *row.values()),
        )


def measurement_for(dep) -> dict[str, Any] | None:
    """The newest measured figures for a Deployment's model, engine and GPU kind, or None.

    What `check` and `plan` hand the planner (planning does not read the history itself).
    A damaged history reads as no measurement: it must not stop a plan.
    """
    gpu_key = dep.cluster.gpus[0].key if dep.cluster.gpus else None
    model = dep.launch.model or (dep.spec.path if dep.spec else None)
    if not model:
        return None
    try:
        return latest_measurement(model, dep.engine, gpu_key)
    except Exception:  # a damaged history must not stop a plan
        return None


def latest_measurement(model: str, engine: str, gpu_key: str | None) -> dict[str, Any] | None:
    """The newest figures an engine logged for this model, engine and GPU kind, or None.

    `gpu_key` None matches runs whose GPUs were not identified. Returns a dict with
    available_kv_bytes, kv_tokens, weights_bytes, max_concurrency, max_model_len, tp,
    kv_cache_dtype (each None when the log did not say) and run_id. Reading an empty or
    missing history returns None rather than creating one.
    """
    path = db_path()
    if not path.exists():
        return None
    db = connect(path)
    try:
        row = db.execute(
            "SELECT * FROM measurements WHERE model = ? AND engine = ? AND gpu_key IS ? "
            "ORDER BY measured_at DESC LIMIT 1",
            (model, engine, gpu_key),
        ).fetchone()
    finally:
        db.close()
    if row is None:
        return None
    out = {k: row[k] for k in MEASUREMENT_FIELDS}
    out["run_id"] = row["run_id"]
    return out
