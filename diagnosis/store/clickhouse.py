"""The ClickHouse store, for many jobs and long retention (clickhouse-driver, native protocol).

Exactly-once without transactions: every table is a ReplacingMergeTree keyed by what identifies
a record, and reads use FINAL, so rows that arrive twice collapse into one. ``applied`` holds
when each request was stored and ``activity`` when each job attempt was last written to (at most
one row per attempt and ``ACTIVITY_EVERY_S``; the latest wins); removing a job or forgetting old
requests is an ``ALTER TABLE ... DELETE`` (a mutation the server applies in the background; a
job's removal is waited for). ``write()`` inserts
the rows first and the (sidecar, seq) of the requests into ``applied`` last: a crash between
the two leaves rows whose resend collapses onto them. Open op rows lose to completed ones through
the version column ``done``; fault reports are versioned by ``revision``.

The schema keeps to what clickhouse-server 18.16 understands (no DateTime64, TTL, CODEC,
LowCardinality), and rows always travel as insert parameters, never inline in query text.
Reads filter before FINAL only on sorting-key columns (or on ``job``, the same for every version
of a fault), where that cannot pick a stale version.
"""

from __future__ import annotations

import base64
import logging
import queue
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from clickhouse_driver import Client
from clickhouse_driver import errors as ch_errors

from c4.proto.codec import CONN_COLUMNS, OP_COLUMNS, Columns
from c4.report import FaultReport
from diagnosis.errors import StoreError
from diagnosis.store import _common
from diagnosis.store.api import (
    BatchRows,
    Body,
    ConnRows,
    DetailRows,
    GroupRecord,
    HostRecord,
    JobRecord,
    OpRows,
    RankRecord,
    RemovedJob,
    Store,
    StoredBatch,
    StoredDetail,
    Write,
)

log = logging.getLogger(__name__)

# Connections to the server at most (queries beyond wait for one to come back).
MAX_CLIENTS = 4
# A job attempt's activity is written at most once per this long (each insert is a part).
ACTIVITY_EVERY_S = 60.0
# How long ``remove_job`` waits for the server to apply its deletions.
MUTATION_WAIT_S = 120.0
_ENGINE = "ENGINE = ReplacingMergeTree{ver} ORDER BY ({key})"
_TABLES: dict[str, tuple[str, str, str]] = {
    # name: (columns, version column, sorting key)
    "applied": ("sidecar String, seq UInt64, t_ns Int64", "", "sidecar, seq"),
    "activity": ("job String, attempt UInt32, seen_ns Int64", "seen_ns", "job, attempt"),
    "attempts": ("job String, attempt UInt32", "", "job, attempt"),
    "ranks": ("job String, attempt UInt32, rank Int32, world_size Int32, host String, "
              "local_rank Int32, pid Int32, gpu String, nic String, backend String, t_ns Int64, "
              "cuda_device String",
              "", "job, attempt, rank"),
    "pgroups": ("job String, attempt UInt32, pg String, ranks Array(Int32), description String",
                "", "job, attempt, pg"),
    "ops": ("job String, attempt UInt32, rank Int32, pg String, seq Int64, op String, "
            "nbytes Int64, dtype String, t_enter_ns Int64, t_start_ns Int64, t_end_ns Int64, "
            "status UInt8, peer Int32, error String, done UInt8",
            "done", "job, attempt, rank, pg, op, peer, seq"),
    "conns": ("job String, attempt UInt32, rank Int32, local String, remote String, t_ns Int64, "
              "bytes_acked Int64, bytes_received Int64, rtt_us Int64, delivery_rate Int64, "
              "retrans Int64, busy_us Int64", "", "job, attempt, rank, local, remote, t_ns"),
    "faults": ("id String, job String, state String, revision UInt64, first_seen_ns Int64, "
               "body String", "revision", "id"),
    # whole batches (payload: base64 of the protobuf), keyed by the request that brought them
    "batches": ("job String, attempt UInt32, kind String, t_lo Int64, t_hi Int64, "
                "count UInt32, sidecar String, seq UInt64, body String", "",
                "job, attempt, t_lo, sidecar, seq"),
    "details": ("fault_id String, job String, attempt UInt32, host String, count UInt32, "
                "sidecar String, seq UInt64, body String", "", "job, fault_id, sidecar, seq"),
    # each host's discovered internals (JSON), the newest by t_ns
    "hosts": ("host String, t_ns UInt64, internals String, digest String, sidecar String", "t_ns",
              "host"),
}
_RANK_FIELDS = ("job", "attempt", "rank", "world_size", "host", "local_rank", "pid", "gpu", "nic",
                "backend", "t_ns", "cuda_device")
_OP_SELECT = ", ".join(OP_COLUMNS) + ", error"
_CONN_SELECT = ", ".join(CONN_COLUMNS)
_ACCESS_HINT = "check the user, password and database in the store URL"
_HINTS = {  # server error codes -> what to do
    81: _ACCESS_HINT,  # UNKNOWN_DATABASE
    192: _ACCESS_HINT,  # UNKNOWN_USER
    193: _ACCESS_HINT,  # WRONG_PASSWORD
    194: _ACCESS_HINT,  # REQUIRED_PASSWORD
    497: _ACCESS_HINT,  # ACCESS_DENIED
    516: _ACCESS_HINT,  # AUTHENTICATION_FAILED
    252: "the server merges parts more slowly than they arrive; the write may be retried",
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ClickHouseStore(Store):
    name = "clickhouse"

    def __init__(self, host: str = "127.0.0.1", port: int = 9000, *, user: str = "default",
                 password: str = "", database: str = "c4", connect_timeout: float = 5.0,
                 send_receive_timeout: float = 120.0) -> None:
        if not _NAME.match(database):
            raise StoreError(f"ClickHouse database name {database!r} must be letters, digits "
                             "and underscores")
        self.host, self.port, self.database = host, port, database
        self._kwargs = dict(host=host, port=port, user=user, password=password,
                            connect_timeout=connect_timeout,
                            send_receive_timeout=send_receive_timeout)
        # a bounded pool, not a client per thread: each client holds a connection and its
        # buffers, and threads come and go (a daemon's RPC threads) while clients stayed
        self._pool: queue.LifoQueue[Client] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._clients: list[Client] = []
        self._clients_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        self._known_attempts: set[tuple[str, int]] = set()
        self._activity: dict[tuple[str, int], float] = {}   # attempt -> last written (monotonic)
        self._create_schema()

    @classmethod
    def from_url(cls, url: str) -> ClickHouseStore:
        """``clickhouse://user:password@host:port/database`` (user, password, port and database
        may be left out: default, empty, 9000, c4)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "clickhouse" or not parts.hostname:
            raise StoreError(f"store URL {url!r} is not clickhouse://user:password@host:port/db")
        try:
            port = parts.port or 9000
        except ValueError as exc:
            raise StoreError(f"store URL {url!r} has a bad port: {exc}") from exc
        return cls(parts.hostname, port,
                   user=urllib.parse.unquote(parts.username or "default"),
                   password=urllib.parse.unquote(parts.password or ""),
                   database=parts.path.lstrip("/") or "c4")

    # -- connections -------------------------------------------------------------------------

    def _where(self) -> str:
        return f"ClickHouse at {self.host}:{self.port} (database {self.database})"

    @contextmanager
    def _borrow(self) -> Iterator[Client]:
        with self._slots:
            if self._closed:
                raise StoreError(f"{self._where()}: the store is closed")
            try:
                client = self._pool.get_nowait()
            except queue.Empty:
                client = Client(database=self.database, **self._kwargs)
                with self._clients_lock:
                    self._clients.append(client)
            try:
                yield client
            finally:
                self._pool.put(client)

    def _run(self, query: str, params: Any = None, *, what: str, client: Client | None = None,
             **kwargs: Any) -> Any:
        """Execute one query; every driver or socket failure becomes a StoreError."""
        if client is None:
            with self._borrow() as borrowed:
                return self._run(query, params, what=what, client=borrowed, **kwargs)
        try:
            return client.execute(query, params, **kwargs)
        except ch_errors.ServerException as exc:
            hint = _HINTS.get(exc.code, "see the server's error log")
            raise StoreError(
                f"{self._where()} refused to {what}: {exc.message.strip()}; {hint}") from exc
        except (ch_errors.Error, OSError, EOFError) as exc:
            # the driver reconnects on the next call, once the server answers again
            client.disconnect()
            raise StoreError(
                f"{self._where()} cannot be reached to {what} ({type(exc).__name__}: {exc}); "
                "check that clickhouse-server is running and listening there") from exc

    def _create_schema(self) -> None:
        boot = Client(database="default", **self._kwargs)
        try:
            self._run(f"CREATE DATABASE IF NOT EXISTS {self.database}", what="create the database",
                      client=boot)
            for table, (columns, ver, key) in _TABLES.items():
                engine = _ENGINE.format(ver=f"({ver})" if ver else "", key=key)
                self._run(f"CREATE TABLE IF NOT EXISTS {self.database}.{table} ({columns}) "
                          f"{engine}", what=f"create table {table}", client=boot)
            self._add_missing_columns(boot)
            # attempts stored before activity was kept count as active now (the retention
            # starts from the upgrade); GLOBAL: on a cluster both tables are Distributed
            self._run(f"INSERT INTO {self.database}.activity (job, attempt, seen_ns) "
                      f"SELECT job, attempt, {time.time_ns()} FROM {self.database}.attempts "
                      f"WHERE (job, attempt) GLOBAL NOT IN (SELECT job, attempt FROM "
                      f"{self.database}.activity)", what="date the attempts stored earlier",
                      client=boot)
        finally:
            boot.disconnect()

    def _add_missing_columns(self, boot: Client) -> None:
        """Columns added after a table was first created (18.16 has no ADD COLUMN IF NOT
        EXISTS, so ask system.columns)."""
        for table, (columns, _ver, _key) in _TABLES.items():
            have = {row[0] for row in self._run(
                "SELECT name FROM system.columns WHERE database = %(db)s AND table = %(t)s",
                what=f"read the columns of {table}", client=boot,
                params={"db": self.database, "t": table})}
            for decl in columns.split(", "):
                name, kind = decl.split(" ", 1)
                if have and name not in have:
                    self._run(f"ALTER TABLE {self.database}.{table} ADD COLUMN {name} {kind}",
                              what=f"add column {name} to {table}", client=boot)

    def close(self) -> None:
        with self._clients_lock:
            self._closed = True
            for client in self._clients:
                client.disconnect()
            self._clients.clear()

    # -- writing -----------------------------------------------------------------------------

    def write(self, writes: Sequence[Write]) -> list[bool]:
        if not writes:
            return []
        with self._write_lock:
            stored = self._applied({(w.sidecar, w.seq) for w in writes})
            duplicate: list[bool] = []
            fresh: list[Write] = []
            for w in writes:
                key = (w.sidecar, w.seq)
                duplicate.append(key in stored)
                if key not in stored:
                    stored.add(key)
                    fresh.append(w)
            if fresh:
                now = time.time_ns()
                self._insert_bodies([w.body for w in fresh])
                self._insert_batches(fresh)
                self._touch({(w.body.job, int(w.body.attempt)) for w in fresh}, now)
                self._insert("applied", "sidecar, seq, t_ns", [[w.sidecar for w in fresh],
                                                               [w.seq for w in fresh],
                                                               [now] * len(fresh)])
        return duplicate

    def _touch(self, attempts: set[tuple[str, int]], now_ns: int) -> None:
        """Note the attempts written to (at most once per ``ACTIVITY_EVERY_S`` each)."""
        t = time.monotonic()
        due = [a for a in attempts if t - self._activity.get(a, -ACTIVITY_EVERY_S) >=
               ACTIVITY_EVERY_S]
        if not due:
            return
        self._insert("activity", "job, attempt, seen_ns",
                     [[a[0] for a in due], [a[1] for a in due], [now_ns] * len(due)])
        for a in due:
            self._activity[a] = t
        if len(self._activity) > 100_000:  # attempts idle for long drop out; rewritten later
            self._activity = {a: w for a, w in self._activity.items()
                              if t - w < ACTIVITY_EVERY_S}

    def _applied(self, keys: set[tuple[str, int]]) -> set[tuple[str, int]]:
        rows = self._run(
            "SELECT DISTINCT sidecar, seq FROM applied WHERE sidecar IN %(sidecars)s "
            "AND seq IN %(seqs)s",
            {"sidecars": tuple({k[0] for k in keys}), "seqs": tuple({k[1] for k in keys})},
            what="look up applied requests")
        return {(s, q) for s, q in rows} & keys

    def _insert(self, table: str, columns: str, data: list[list[Any]]) -> None:
        self._run(f"INSERT INTO {table} ({columns}) VALUES", data, columnar=True,
                  what=f"insert into {table}")

    def _insert_batches(self, writes: list[Write]) -> None:
        """Whole batches and detail records, keyed by the request that brought them."""
        batches = [(w, w.body) for w in writes if isinstance(w.body, BatchRows)]
        details = [(w, w.body) for w in writes if isinstance(w.body, DetailRows)]
        if batches:
            self._insert("batches", "job, attempt, kind, t_lo, t_hi, count, sidecar, seq, body",
                         [[b.job for _, b in batches], [int(b.attempt) for _, b in batches],
                          [b.kind for _, b in batches], [int(b.t_lo) for _, b in batches],
                          [int(b.t_hi) for _, b in batches], [int(b.count) for _, b in batches],
                          [w.sidecar for w, _ in batches], [int(w.seq) for w, _ in batches],
                          [base64.b64encode(b.payload).decode() for _, b in batches]])
        if details:
            self._insert("details", "fault_id, job, attempt, host, count, sidecar, seq, body",
                         [[b.fault_id for _, b in details], [b.job for _, b in details],
                          [int(b.attempt) for _, b in details], [b.host for _, b in details],
                          [int(b.count) for _, b in details], [w.sidecar for w, _ in details],
                          [int(w.seq) for w, _ in details],
                          [base64.b64encode(b.payload).decode() for _, b in details]])

    def _insert_bodies(self, bodies: list[Body]) -> None:
        # each insert makes a part for the server to merge: skip attempts already stored
        attempts = {(b.job, int(b.attempt)) for b in bodies} - self._known_attempts
        # later records of one key win; within one insert block that order is not kept
        ranks = {(b.job, b.attempt, b.rank): b for b in bodies if isinstance(b, RankRecord)}
        groups = {(b.job, b.attempt, b.pg): b for b in bodies if isinstance(b, GroupRecord)}
        ops = [b for b in bodies if isinstance(b, OpRows) and len(b.cols)]
        conns = [b for b in bodies if isinstance(b, ConnRows) and len(b.cols)]
        for b in bodies:
            if not isinstance(b, (RankRecord, GroupRecord, OpRows, ConnRows, BatchRows,
                                  DetailRows)):
                raise TypeError(f"cannot store a {type(b).__name__}")
        if ops:
            self._insert_ops(ops)
        if conns:
            self._insert_conns(conns)
        if ranks:
            recs = list(ranks.values())
            self._insert("ranks", ", ".join(_RANK_FIELDS),
                         [[getattr(r, f) for r in recs] for f in _RANK_FIELDS])
        if groups:
            grecs = list(groups.values())
            self._insert("pgroups", "job, attempt, pg, ranks, description",
                         [[g.job for g in grecs], [g.attempt for g in grecs],
                          [g.pg for g in grecs], [list(g.ranks) for g in grecs],
                          [g.desc for g in grecs]])
        if attempts:  # last, so that a listed attempt has its rows
            self._insert("attempts", "job, attempt", [[a[0] for a in attempts],
                                                      [a[1] for a in attempts]])
            self._known_attempts |= attempts

    def _insert_ops(self, batches: list[OpRows]) -> None:
        data: dict[str, list[Any]] = {"job": [], "attempt": [], "error": []}
        for b in batches:
            n = len(b.cols)
            data["job"] += [b.job] * n
            data["attempt"] += [int(b.attempt)] * n
            data["error"] += _common.error_list(b.cols)
            for name in _common.OP_STRING_COLUMNS:
                data.setdefault(name, []).extend(_common.names_of(b.cols, name))
        for name in OP_COLUMNS:
            if name not in _common.OP_STRING_COLUMNS:
                data[name] = np.concatenate([b.cols[name] for b in batches]).tolist()
        t_end = np.concatenate([b.cols["t_end_ns"] for b in batches])
        data["done"] = (t_end != -1).astype(np.uint8).tolist()
        self._insert("ops", ", ".join(data), list(data.values()))

    def _insert_conns(self, batches: list[ConnRows]) -> None:
        data: dict[str, list[Any]] = {"job": [], "attempt": []}
        for b in batches:
            n = len(b.cols)
            data["job"] += [b.job] * n
            data["attempt"] += [int(b.attempt)] * n
            for name in _common.CONN_STRING_COLUMNS:
                data.setdefault(name, []).extend(_common.names_of(b.cols, name))
        for name in CONN_COLUMNS:
            if name not in _common.CONN_STRING_COLUMNS:
                data[name] = np.concatenate([b.cols[name] for b in batches]).tolist()
        self._insert("conns", ", ".join(data), list(data.values()))

    # -- removing -----------------------------------------------------------------------------

    def remove_job(self, job: str) -> RemovedJob:
        with self._write_lock:
            attempts = self._run("SELECT count(DISTINCT attempt) FROM attempts WHERE job = "
                                 "%(job)s", {"job": job}, what="count a job's attempts")
            faults = self._run("SELECT count() FROM faults FINAL WHERE job = %(job)s",
                               {"job": job}, what="count a job's fault reports")
            for table in ("attempts", "activity", "ranks", "pgroups", "ops", "conns", "batches",
                          "details", "faults"):
                self._run(f"ALTER TABLE {table} DELETE WHERE job = %(job)s", {"job": job},
                          what=f"remove job {job!r} from {table}")
            self._known_attempts = {a for a in self._known_attempts if a[0] != job}
            self._activity = {a: t for a, t in self._activity.items() if a[0] != job}
            self._wait_for_mutations()
        return RemovedJob(job, int(attempts[0][0]), int(faults[0][0]))

    def _wait_for_mutations(self) -> None:
        deadline = time.monotonic() + MUTATION_WAIT_S
        while True:
            left = self._run("SELECT count() FROM system.mutations WHERE database = %(db)s "
                             "AND is_done = 0", {"db": self.database},
                             what="wait for deletions")[0][0]
            if not left:
                return
            if time.monotonic() > deadline:
                log.warning("%s still applies %d deletions after %.0f s; they finish in the "
                            "background", self._where(), left, MUTATION_WAIT_S)
                return
            time.sleep(0.05)

    def forget_applied(self, before_ns: int) -> int:
        # rows from before requests were timed (t_ns 0) are kept: their age is unknown
        params = {"t": int(before_ns)}
        n = int(self._run("SELECT count() FROM applied WHERE t_ns > 0 AND t_ns < %(t)s", params,
                          what="count old requests")[0][0])
        if n:
            with self._write_lock:
                self._run("ALTER TABLE applied DELETE WHERE t_ns > 0 AND t_ns < %(t)s", params,
                          what="forget old requests")
                self._wait_for_mutations()
        return n

    def put_host(self, record: HostRecord) -> None:
        self._insert("hosts", "host, t_ns, internals, digest, sidecar",
                     [[record.host], [max(int(record.t_ns), 0)], [record.internals],
                      [record.digest], [record.sidecar]])

    def hosts(self) -> list[HostRecord]:
        rows = self._run("SELECT host, t_ns, internals, digest, sidecar FROM hosts FINAL "
                         "ORDER BY host", what="read host internals")
        return [HostRecord(*row) for row in rows]

    def put_fault(self, report: FaultReport) -> None:
        if not report.id:
            raise StoreError("a fault report needs an id to be stored; the daemon assigns one")
        if report.revision < 0:
            raise StoreError(f"fault {report.id} has revision {report.revision}; revisions "
                             "start at 0")
        self._insert("faults", "id, job, state, revision, first_seen_ns, body",
                     [[report.id], [report.job], [report.state], [int(report.revision)],
                      [int(report.first_seen_ns)], [_common.fault_to_text(report)]])

    # -- reading -----------------------------------------------------------------------------

    def _attempt(self, job: str, attempt: int | None) -> int | None:
        if attempt is not None:
            return int(attempt)
        rows = self._run("SELECT max(attempt), count() FROM attempts WHERE job = %(job)s",
                         {"job": job}, what="find the latest attempt")
        return rows[0][0] if rows and rows[0][1] else None

    def _select(self, sql: str, params: dict[str, Any], what: str, names: Sequence[str]
                ) -> dict[str, Sequence[Any]]:
        cols = self._run(sql, params, columnar=True, what=what)
        if not cols:  # no rows: the driver returns no columns at all
            return {name: [] for name in names}
        return dict(zip(names, cols, strict=True))

    def ops(self, job: str, attempt: int | None = None, *, rank: int | None = None,
            pg: str | None = None, limit: int = 0) -> Columns:
        att = self._attempt(job, attempt)
        params: dict[str, Any] = {"job": job, "attempt": att or 0}
        sql = f"SELECT {_OP_SELECT} FROM ops FINAL WHERE job = %(job)s AND attempt = %(attempt)s"
        if rank is not None:
            sql += " AND rank = %(rank)s"
            params["rank"] = int(rank)
        if pg is not None:
            sql += " AND pg = %(pg)s"
            params["pg"] = pg
        sql += " ORDER BY t_enter_ns, rank, seq"
        if limit > 0:
            sql += f" LIMIT {int(limit)}"
        names = [*OP_COLUMNS, "error"]
        data = ({n: [] for n in names} if att is None else
                self._select(sql, params, "read op records", names))
        return _common.op_columns(data, data["error"])

    def count_ops(self, job: str, attempt: int | None = None) -> int:
        att = self._attempt(job, attempt)
        if att is None:
            return 0
        rows = self._run("SELECT count() FROM ops FINAL WHERE job = %(job)s AND attempt = %(a)s",
                         {"job": job, "a": att}, what="count op records")
        return int(rows[0][0])

    def conns(self, job: str, attempt: int | None = None) -> Columns:
        att = self._attempt(job, attempt)
        names = list(CONN_COLUMNS)
        data = {n: [] for n in names} if att is None else self._select(
            f"SELECT {_CONN_SELECT} FROM conns FINAL WHERE job = %(job)s AND attempt = %(a)s "
            "ORDER BY t_ns, rank", {"job": job, "a": att}, "read connection samples", names)
        return _common.conn_columns(data)

    def batches(self, job: str, attempt: int | None = None, *,
                kinds: Sequence[str] | None = None) -> list[StoredBatch]:
        att = self._attempt(job, attempt)
        if att is None:
            return []
        sql = ("SELECT kind, count, t_lo, t_hi, body FROM batches FINAL WHERE job = %(job)s "
               "AND attempt = %(a)s")
        params: dict[str, Any] = {"job": job, "a": att}
        if kinds is not None:
            sql += " AND kind IN %(kinds)s"
            params["kinds"] = tuple(kinds)
        rows = self._run(sql + " ORDER BY t_lo, sidecar, seq", params, what="read batches")
        return [StoredBatch(k, int(n), int(lo), int(hi), base64.b64decode(body))
                for k, n, lo, hi, body in rows]

    def details(self, job: str, fault_id: str | None = None) -> list[StoredDetail]:
        sql = ("SELECT fault_id, job, attempt, host, count, body FROM details FINAL "
               "WHERE job = %(job)s")
        params: dict[str, Any] = {"job": job}
        if fault_id is not None:
            sql += " AND fault_id = %(f)s"
            params["f"] = fault_id
        rows = self._run(sql + " ORDER BY fault_id, sidecar, seq", params,
                         what="read detail records")
        return [StoredDetail(f, j, int(a), h, int(n), base64.b64decode(b))
                for f, j, a, h, n, b in rows]

    def ranks(self, job: str, attempt: int | None = None) -> list[RankRecord]:
        att = self._attempt(job, attempt)
        if att is None:
            return []
        rows = self._run(f"SELECT {', '.join(_RANK_FIELDS)} FROM ranks FINAL WHERE job = %(job)s "
                         "AND attempt = %(a)s ORDER BY rank", {"job": job, "a": att},
                         what="read ranks")
        return [RankRecord(*row) for row in rows]

    def groups(self, job: str, attempt: int | None = None) -> list[GroupRecord]:
        att = self._attempt(job, attempt)
        if att is None:
            return []
        rows = self._run("SELECT job, attempt, pg, ranks, description FROM pgroups FINAL "
                         "WHERE job = %(job)s AND attempt = %(a)s ORDER BY pg",
                         {"job": job, "a": att}, what="read process groups")
        return [GroupRecord(j, a, pg, tuple(r), d) for j, a, pg, r, d in rows]

    def jobs(self) -> list[JobRecord]:
        rank_rows = self._run(
            "SELECT job, attempt, max(world_size), count(), groupUniqArray(host), "
            "minIf(t_ns, t_ns > 0), max(t_ns) FROM ranks FINAL GROUP BY job, attempt",
            what="list jobs")
        op_rows = self._run(
            "SELECT job, attempt, count(), min(t_enter_ns), max(greatest(t_enter_ns, t_end_ns)) "
            "FROM ops FINAL GROUP BY job, attempt", what="summarise op records")
        ranks = {(j, a): _common.RankAgg(w, n, set(h), lo, hi)
                 for j, a, w, n, h, lo, hi in rank_rows}
        ops = {(j, a): _common.OpAgg(n, lo, hi) for j, a, n, lo, hi in op_rows}
        return _common.build_jobs(ranks, ops)

    def job_seen(self) -> dict[str, int]:
        ranked = {row[0] for row in self._run("SELECT DISTINCT job FROM ranks",
                                              what="list jobs")}
        rows = self._run("SELECT job, max(seen_ns) FROM activity GROUP BY job",
                         what="read when jobs were last written to")
        return {job: int(t) for job, t in rows if job in ranked}

    def get_fault(self, fault_id: str) -> FaultReport | None:
        rows = self._run("SELECT body FROM faults FINAL WHERE id = %(id)s", {"id": fault_id},
                         what="read a fault report")
        return _common.fault_from_text(rows[0][0]) if rows else None

    def list_faults(self, job: str | None = None, *, open_only: bool = False,
                    limit: int = 0) -> list[FaultReport]:
        sql = "SELECT state, body FROM faults FINAL"
        params: dict[str, Any] = {}
        if job is not None:
            sql += " WHERE job = %(job)s"
            params["job"] = job
        sql += " ORDER BY first_seen_ns DESC, id"
        rows = self._run(sql, params, what="list fault reports")
        # state is not in the sorting key: filter after FINAL has picked the latest revision
        bodies = [body for state, body in rows if not open_only or state == "open"]
        return [_common.fault_from_text(b) for b in (bodies[:limit] if limit > 0 else bodies)]

    def count_faults(self, job: str | None = None, *, open_only: bool = False) -> int:
        # the latest revision of each report first (FINAL in the subquery), its state after:
        # a condition on state next to FINAL could be moved before the merge (PREWHERE) and
        # count a report by an older revision's state
        inner = "SELECT state FROM faults FINAL"
        params: dict[str, Any] = {}
        if job is not None:
            inner += " WHERE job = %(job)s"
            params["job"] = job
        sql = f"SELECT count() FROM ({inner})"
        if open_only:
            sql += " WHERE state = 'open'"
        return int(self._run(sql, params, what="count fault reports")[0][0])
