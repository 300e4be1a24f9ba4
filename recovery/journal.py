"""The recovery journal: every decision, every recovery with its state transitions, and the
job events the supervisor reports, in one SQLite file shared by ``c4 recover``, ``c4 launch``
and the CLI. Each state change is one transaction, so a controller killed at any point finds a
consistent state when it starts again."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recovery.errors import RecoveryError
from recovery.policy import History
from recovery.states import State, check_transition

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY, t_ns INTEGER NOT NULL, job TEXT NOT NULL, fault_id TEXT NOT NULL,
    revision INTEGER NOT NULL, kind TEXT NOT NULL, node TEXT, action TEXT NOT NULL,
    reason TEXT NOT NULL, recovery_id INTEGER);
CREATE TABLE IF NOT EXISTS recoveries (
    id INTEGER PRIMARY KEY, job TEXT NOT NULL, fault_id TEXT NOT NULL, node TEXT NOT NULL,
    state TEXT NOT NULL, backend TEXT NOT NULL, onset_ns INTEGER NOT NULL,
    report_ns INTEGER NOT NULL, created_ns INTEGER NOT NULL, updated_ns INTEGER NOT NULL,
    reason TEXT NOT NULL, note TEXT NOT NULL DEFAULT '', UNIQUE (job, fault_id));
CREATE TABLE IF NOT EXISTS transitions (
    id INTEGER PRIMARY KEY, recovery_id INTEGER NOT NULL, t_ns INTEGER NOT NULL,
    src TEXT NOT NULL, dst TEXT NOT NULL, note TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, job TEXT NOT NULL, t_ns INTEGER NOT NULL, kind TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0, step INTEGER, data TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS events_job ON events (job, t_ns);
"""

#: Job events the supervisor records (``c4 launch``).
EVENT_KINDS = ("launched", "stopping", "stopped", "loaded", "first_step", "checkpoint",
               "exited")


def default_journal_path() -> Path:
    """``C4_RECOVERY_JOURNAL``, else the user's state directory."""
    if os.environ.get("C4_RECOVERY_JOURNAL"):
        return Path(os.environ["C4_RECOVERY_JOURNAL"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "c4" / "recovery.db"


@dataclass(frozen=True)
class Recovery:
    id: int
    job: str
    fault_id: str
    node: str
    state: State
    backend: str
    onset_ns: int
    report_ns: int
    created_ns: int
    updated_ns: int
    reason: str
    note: str


@dataclass(frozen=True)
class DecisionRow:
    id: int
    t_ns: int
    job: str
    fault_id: str
    revision: int
    kind: str
    node: str | None
    action: str
    reason: str
    recovery_id: int | None


@dataclass(frozen=True)
class Transition:
    recovery_id: int
    t_ns: int
    src: State
    dst: State
    note: str


@dataclass(frozen=True)
class Event:
    job: str
    t_ns: int
    kind: str
    attempt: int
    step: int | None
    data: dict[str, Any]


class Journal:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise RecoveryError(f"cannot open the recovery journal {self.path}: {exc}; check "
                                "the path and its permissions (C4_RECOVERY_JOURNAL)") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _tx(self, fn: Any) -> Any:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                out = fn(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return out

    # ----- decisions ---------------------------------------------------------------------------
    def record_decision(self, *, job: str, fault_id: str, revision: int, kind: str,
                        node: str | None, action: str, reason: str,
                        recovery_id: int | None = None, t_ns: int | None = None) -> int:
        t_ns = t_ns or time.time_ns()
        return self._tx(lambda db: db.execute(
            "INSERT INTO decisions (t_ns, job, fault_id, revision, kind, node, action, reason, "
            "recovery_id) VALUES (?,?,?,?,?,?,?,?,?)",
            (t_ns, job, fault_id, revision, kind, node, action, reason, recovery_id)).lastrowid)

    def decisions(self, job: str = "", limit: int = 0) -> list[DecisionRow]:
        sql = "SELECT * FROM decisions" + (" WHERE job = ?" if job else "") + " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self._db.execute(sql, (job,) if job else ()).fetchall()
        return [DecisionRow(*r) for r in reversed(rows)]

    # ----- recoveries --------------------------------------------------------------------------
    def create_recovery(self, *, job: str, fault_id: str, node: str, backend: str,
                        onset_ns: int, report_ns: int, reason: str,
                        now_ns: int | None = None) -> Recovery | None:
        """A new recovery in state DECIDED; None if this fault already has one."""
        now = now_ns or time.time_ns()

        def insert(db: sqlite3.Connection) -> int | None:
            try:
                cur = db.execute(
                    "INSERT INTO recoveries (job, fault_id, node, state, backend, onset_ns, "
                    "report_ns, created_ns, updated_ns, reason) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (job, fault_id, node, State.DECIDED.value, backend, onset_ns, report_ns,
                     now, now, reason))
            except sqlite3.IntegrityError:
                return None
            db.execute("INSERT INTO transitions (recovery_id, t_ns, src, dst, note) "
                       "VALUES (?,?,?,?,?)", (cur.lastrowid, now, "", State.DECIDED.value,
                                               reason))
            return cur.lastrowid

        rid = self._tx(insert)
        return self.recovery(rid) if rid is not None else None

    def transition(self, rid: int, dst: State, note: str = "", t_ns: int | None = None
                   ) -> Recovery:
        """Move a recovery to ``dst`` if the state machine allows it (checked in the same
        transaction that writes it, so two controllers cannot both make the move)."""
        t_ns = t_ns or time.time_ns()

        def move(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT state FROM recoveries WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise RecoveryError(f"no recovery {rid} in {self.path}")
            src = State(row[0])
            check_transition(src, dst)
            db.execute("UPDATE recoveries SET state = ?, updated_ns = ?, note = ? WHERE id = ?",
                       (dst.value, t_ns, note, rid))
            db.execute("INSERT INTO transitions (recovery_id, t_ns, src, dst, note) "
                       "VALUES (?,?,?,?,?)", (rid, t_ns, src.value, dst.value, note))

        self._tx(move)
        return self.recovery(rid)

    def recovery(self, rid: int) -> Recovery:
        with self._lock:
            row = self._db.execute("SELECT * FROM recoveries WHERE id = ?", (rid,)).fetchone()
        if row is None:
            raise RecoveryError(f"no recovery {rid} in {self.path}; `c4 recoveries` lists them")
        return _recovery(row)

    def recoveries(self, job: str = "", *, active_only: bool = False) -> list[Recovery]:
        sql, args = "SELECT * FROM recoveries WHERE 1=1", []
        if job:
            sql += " AND job = ?"
            args.append(job)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        out = [_recovery(r) for r in rows]
        return [r for r in out if not r.state.terminal] if active_only else out

    def transitions(self, rid: int) -> list[Transition]:
        with self._lock:
            rows = self._db.execute("SELECT recovery_id, t_ns, src, dst, note FROM transitions "
                                    "WHERE recovery_id = ? ORDER BY id", (rid,)).fetchall()
        return [Transition(r[0], r[1], State(r[2]) if r[2] else State.DECIDED, State(r[3]),
                           r[4]) for r in rows]

    def history(self, job: str, fault_id: str, now_ns: int) -> History:
        """What the policy needs to know about past recoveries."""
        recs = self.recoveries()
        acted = [r for r in recs if r.state != State.ROLLED_BACK]
        mine = [r for r in acted if r.job == job]
        hour_ago = now_ns - 3600 * 10**9
        return History(
            job_isolations=len(mine),
            job_isolated_nodes=frozenset(r.node for r in mine),
            isolations_last_hour=sum(1 for r in acted if r.created_ns >= hour_ago),
            last_recovery_ns=max((r.created_ns for r in mine), default=None),
            fault_handled=any(r.fault_id == fault_id and r.job == job for r in recs))

    # ----- job events --------------------------------------------------------------------------
    def add_event(self, job: str, kind: str, *, attempt: int = 0, step: int | None = None,
                  data: dict[str, Any] | None = None, t_ns: int | None = None) -> None:
        if kind not in EVENT_KINDS:
            raise RecoveryError(f"unknown job event {kind!r}; one of {EVENT_KINDS}")
        t_ns = t_ns or time.time_ns()
        self._tx(lambda db: db.execute(
            "INSERT INTO events (job, t_ns, kind, attempt, step, data) VALUES (?,?,?,?,?,?)",
            (job, t_ns, kind, attempt, step, json.dumps(data or {}))))

    def events(self, job: str, since_ns: int = 0) -> list[Event]:
        with self._lock:
            rows = self._db.execute(
                "SELECT job, t_ns, kind, attempt, step, data FROM events WHERE job = ? AND "
                "t_ns >= ? ORDER BY t_ns, id", (job, since_ns)).fetchall()
        return [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]

    def jobs(self) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT job FROM events UNION "
                                    "SELECT DISTINCT job FROM recoveries").fetchall()
        return sorted(r[0] for r in rows)


def _recovery(row: tuple[Any, ...]) -> Recovery:
    return Recovery(row[0], row[1], row[2], row[3], State(row[4]), *row[5:])
