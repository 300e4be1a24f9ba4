"""The embedded store: one SQLite file in WAL mode, one transaction per ``write()`` call.

Strings (process groups, op names, dtypes, endpoints) live once in a ``strings`` table and rows
hold their integer ids, so a batch turns into rows by numpy indexing alone and the op key is six
integers, led by seq so that new calls append (a store made with the earlier rank-led key keeps
working, only slower to write). The (sidecar, seq) of every stored request goes into
``applied`` in the same transaction as its rows, which makes a resend a no-op even after a
restart; it holds when the request was stored, so that the retention can forget old ones, and
``attempts.seen_ns`` when each job attempt was last written to.

Threads: ``write`` and ``put_fault`` serialise on a lock and share one writer connection;
readers borrow one of at most ``MAX_READERS`` reader connections (WAL lets them read while the
writer writes). Memory is bounded whatever the number of threads: the writer's page cache is
``CACHE_KIB``, each reader's ``READER_CACHE_KIB`` (a daemon serving queries from 16 RPC threads
once held a 64 MiB cache per thread, and its memory grew with every new thread that scanned the
op table). An in-memory store has one connection, shared under the write lock.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import repeat

import numpy as np

from c4.proto.codec import CONN_COLUMNS, OP_COLUMNS, Columns, empty_columns
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

SCHEMA_VERSION = 5
# Requests forgotten per transaction by ``forget_applied`` (the writer waits meanwhile).
FORGET_CHUNK = 20_000
# Tables whose rows belong to one job attempt (``aid``).
_ATTEMPT_TABLES = ("ops", "conns", "ranks", "pgroups", "batches", "details")
CACHE_KIB = 64 * 1024  # the writer connection's page cache, allocated as used
# Readers mostly scan (whole-job reads, counts): a big cache per reader buys little and costs
# its size once per connection.
READER_CACHE_KIB = 4 * 1024
MAX_READERS = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS applied (
  sidecar TEXT NOT NULL, seq INTEGER NOT NULL, t_ns INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (sidecar, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS strings (id INTEGER PRIMARY KEY, s TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS attempts (
  aid INTEGER PRIMARY KEY, job TEXT NOT NULL, attempt INTEGER NOT NULL,
  first_ns INTEGER NOT NULL DEFAULT 0, last_ns INTEGER NOT NULL DEFAULT 0,
  seen_ns INTEGER NOT NULL DEFAULT 0, UNIQUE (job, attempt));
CREATE TABLE IF NOT EXISTS ranks (
  aid INTEGER NOT NULL, rank INTEGER NOT NULL, world_size INTEGER, host TEXT,
  local_rank INTEGER, pid INTEGER, gpu TEXT, nic TEXT, backend TEXT, t_ns INTEGER,
  cuda_device TEXT NOT NULL DEFAULT '', PRIMARY KEY (aid, rank)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pgroups (
  aid INTEGER NOT NULL, pg TEXT NOT NULL, ranks TEXT NOT NULL, description TEXT,
  PRIMARY KEY (aid, pg)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ops (
  aid INTEGER NOT NULL, rank INTEGER NOT NULL, pg INTEGER NOT NULL, op INTEGER NOT NULL,
  peer INTEGER NOT NULL, seq INTEGER NOT NULL, nbytes INTEGER, dtype INTEGER,
  t_enter_ns INTEGER, t_start_ns INTEGER, t_end_ns INTEGER, status INTEGER, error TEXT,
  PRIMARY KEY (aid, seq, pg, op, rank, peer)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ops_by_time ON ops (aid, t_enter_ns, rank);
CREATE TABLE IF NOT EXISTS conns (
  aid INTEGER NOT NULL, rank INTEGER NOT NULL, local INTEGER NOT NULL, remote INTEGER NOT NULL,
  t_ns INTEGER NOT NULL, bytes_acked INTEGER, bytes_received INTEGER, rtt_us INTEGER,
  delivery_rate INTEGER, retrans INTEGER, busy_us INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (aid, rank, local, remote, t_ns)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS faults (
  id TEXT PRIMARY KEY, job TEXT NOT NULL, state TEXT NOT NULL, revision INTEGER NOT NULL,
  first_seen_ns INTEGER NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS faults_by_job ON faults (job);
CREATE TABLE IF NOT EXISTS batches (
  id INTEGER PRIMARY KEY, aid INTEGER NOT NULL, kind TEXT NOT NULL, count INTEGER NOT NULL,
  t_lo INTEGER NOT NULL, t_hi INTEGER NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS batches_by_time ON batches (aid, t_lo);
CREATE TABLE IF NOT EXISTS details (
  id INTEGER PRIMARY KEY, fault_id TEXT NOT NULL, aid INTEGER NOT NULL, host TEXT NOT NULL,
  count INTEGER NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS details_by_fault ON details (fault_id);
CREATE TABLE IF NOT EXISTS hosts (
  host TEXT PRIMARY KEY, t_ns INTEGER NOT NULL, internals TEXT NOT NULL, digest TEXT,
  sidecar TEXT);
"""

# A completed row (t_end_ns != -1) replaces an open one; an open row never replaces a completed one.
_UPSERT_OPS = """
INSERT INTO ops (aid, rank, pg, op, peer, seq, nbytes, dtype, t_enter_ns, t_start_ns, t_end_ns,
                 status, error)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (aid, rank, pg, op, peer, seq) DO UPDATE SET
  nbytes = excluded.nbytes, dtype = excluded.dtype, t_enter_ns = excluded.t_enter_ns,
  t_start_ns = excluded.t_start_ns, t_end_ns = excluded.t_end_ns, status = excluded.status,
  error = excluded.error
WHERE ops.t_end_ns = -1 OR excluded.t_end_ns != -1
"""

_OP_SELECT = ", ".join(OP_COLUMNS)
_OP_KEY = ("rank", "pg", "op", "peer", "seq")
_CONN_SELECT = ", ".join(CONN_COLUMNS)


def _seq64(seq: int) -> int:
    """Ingest seq is uint64; SQLite integers are int64: fold the top half onto negatives."""
    return seq - (1 << 64) if seq >= 1 << 63 else seq


class SQLiteStore(Store):
    name = "sqlite"

    def __init__(self, path: str, *, synchronous: str = "FULL") -> None:
        """``synchronous``: FULL (default) makes every commit survive power loss; NORMAL only
        a crash of the process."""
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise StoreError(f"SQLite synchronous mode {synchronous!r} is not OFF, NORMAL, FULL "
                             "or EXTRA")
        self.path = path
        self._memory = path == ":memory:"
        self._synchronous = synchronous
        self._writer: sqlite3.Connection | None = None
        self._readers: queue.LifoQueue[sqlite3.Connection] = queue.LifoQueue()
        self._reader_slots = threading.BoundedSemaphore(MAX_READERS)
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._closed = False
        # Writer-side caches, valid only for committed data: cleared when a transaction fails.
        self._aids: dict[tuple[str, int], int] = {}
        self._sids: dict[str, int] = {}
        # Reader-side id -> string; ids never change once committed, so sharing is safe.
        self._names: dict[int, str] = {}
        self._shared = self._connect() if self._memory else None
        conn = self._conn()
        try:
            with self._write_lock:
                found = conn.execute("PRAGMA user_version").fetchone()[0]
                conn.executescript(_SCHEMA)
                if found == 1:  # version 1 had no busy time in its connection samples
                    conn.execute("ALTER TABLE conns ADD COLUMN busy_us INTEGER NOT NULL "
                                 "DEFAULT 0")
                # versions 1-3 had no rank device (and a store of a branch that called
                # itself 4 before it came): by column, not by version
                have = {row[1] for row in conn.execute("PRAGMA table_info(ranks)")}
                if "cuda_device" not in have:
                    conn.execute("ALTER TABLE ranks ADD COLUMN cuda_device TEXT NOT NULL "
                                 "DEFAULT ''")
                self._add_times(conn)
                conn.execute("CREATE INDEX IF NOT EXISTS applied_by_time ON applied (t_ns)")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot create the tables of SQLite store {path}: {exc}") from exc

    @staticmethod
    def _add_times(conn: sqlite3.Connection) -> None:
        """Stores made before version 5 had no times on requests and attempts: what they hold
        counts as stored now (the retention starts from the upgrade)."""
        now = time.time_ns()
        for table, column in (("applied", "t_ns"), ("attempts", "seen_ns")):
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} INTEGER NOT NULL "
                             "DEFAULT 0")
                conn.execute(f"UPDATE {table} SET {column} = ?", (now,))

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        path = url.removeprefix("sqlite://")
        if not path:
            raise StoreError(f"store URL {url!r} names no file: use sqlite:///PATH or "
                             "sqlite://:memory:")
        return cls(path)

    # -- connections -------------------------------------------------------------------------

    def _connect(self, cache_kib: int = CACHE_KIB) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=30.0)
            if not self._memory:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            # the writer: the op tables' pages a commit touches stay cached between commits
            conn.execute(f"PRAGMA cache_size = -{cache_kib}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite store {self.path}: {exc}; check that its "
                             "directory exists and is writable") from exc
        with self._opened_lock:
            self._opened.append(conn)
        return conn

    def _conn(self) -> sqlite3.Connection:
        """The writer connection; call with the write lock held."""
        if self._closed:
            raise StoreError(f"SQLite store {self.path} is closed")
        if self._shared is not None:
            return self._shared
        if self._writer is None:
            self._writer = self._connect()
        return self._writer

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        if self._shared is not None:
            with self._write_lock:
                conn = self._conn()
                try:
                    yield conn
                except sqlite3.Error as exc:
                    raise StoreError(f"reading SQLite store {self.path} failed: {exc}") from exc
            return
        with self._reader_slots:
            if self._closed:
                raise StoreError(f"SQLite store {self.path} is closed")
            try:
                conn = self._readers.get_nowait()
            except queue.Empty:
                conn = self._connect(READER_CACHE_KIB)
            try:
                yield conn
            except sqlite3.Error as exc:
                raise StoreError(f"reading SQLite store {self.path} failed: {exc}") from exc
            finally:
                if conn.in_transaction:  # an abandoned read must not pin an old snapshot
                    conn.rollback()
                self._readers.put(conn)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            conn = self._conn()
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                self._aids.clear()
                self._sids.clear()
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"writing SQLite store {self.path} failed: {exc}; nothing "
                                     "of this write was stored") from exc
                raise

    def close(self) -> None:
        with self._write_lock, self._opened_lock:
            self._closed = True
            for conn in self._opened:
                conn.close()
            self._opened.clear()

    # -- writing -----------------------------------------------------------------------------

    def write(self, writes: Sequence[Write]) -> list[bool]:
        duplicate: list[bool] = []
        now = time.time_ns()
        touched: set[int] = set()
        with self._transaction() as conn:
            for w in writes:
                cur = conn.execute("INSERT OR IGNORE INTO applied (sidecar, seq, t_ns) "
                                   "VALUES (?, ?, ?)", (w.sidecar, _seq64(w.seq), now))
                if cur.rowcount == 0:
                    duplicate.append(True)
                    continue
                duplicate.append(False)
                touched.add(self._apply(conn, w.body))
            conn.executemany("UPDATE attempts SET seen_ns = ? WHERE aid = ?",
                             [(now, aid) for aid in touched])
        return duplicate

    def _apply(self, conn: sqlite3.Connection, body: Body) -> int:
        """Store one body; returns its attempt's id."""
        aid = self._aid(conn, body.job, body.attempt)
        if isinstance(body, OpRows):
            self._put_ops(conn, aid, body.cols)
        elif isinstance(body, ConnRows):
            self._put_conns(conn, aid, body.cols)
        elif isinstance(body, BatchRows):
            conn.execute("INSERT INTO batches (aid, kind, count, t_lo, t_hi, body) "
                         "VALUES (?, ?, ?, ?, ?, ?)",
                         (aid, body.kind, body.count, body.t_lo, body.t_hi, body.payload))
        elif isinstance(body, DetailRows):
            conn.execute("INSERT INTO details (fault_id, aid, host, count, body) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (body.fault_id, aid, body.host, body.count, body.payload))
        elif isinstance(body, RankRecord):
            conn.execute(
                "INSERT OR REPLACE INTO ranks (aid, rank, world_size, host, local_rank, pid, "
                "gpu, nic, backend, t_ns, cuda_device) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (aid, body.rank, body.world_size, body.host, body.local_rank, body.pid,
                 body.gpu, body.nic, body.backend, body.t_ns, body.cuda_device))
        elif isinstance(body, GroupRecord):
            conn.execute("INSERT OR REPLACE INTO pgroups VALUES (?, ?, ?, ?)",
                         (aid, body.pg, json.dumps([int(r) for r in body.ranks]), body.desc))
        else:
            raise TypeError(f"cannot store a {type(body).__name__}")
        return aid

    def remove_job(self, job: str) -> RemovedJob:
        with self._transaction() as conn:
            aids = [row[0] for row in conn.execute("SELECT aid FROM attempts WHERE job = ?",
                                                   (job,))]
            for aid in aids:
                for table in _ATTEMPT_TABLES:
                    conn.execute(f"DELETE FROM {table} WHERE aid = ?", (aid,))
            conn.execute("DELETE FROM attempts WHERE job = ?", (job,))
            faults = conn.execute("DELETE FROM faults WHERE job = ?", (job,)).rowcount
            for key in [k for k in self._aids if k[0] == job]:
                del self._aids[key]
        return RemovedJob(job, len(aids), faults)

    def forget_applied(self, before_ns: int) -> int:
        """In chunks, one transaction each: the writer goes on between them."""
        total = 0
        while True:
            with self._transaction() as conn:
                n = conn.execute(
                    "DELETE FROM applied WHERE (sidecar, seq) IN (SELECT sidecar, seq FROM "
                    "applied WHERE t_ns < ? LIMIT ?)", (before_ns, FORGET_CHUNK)).rowcount
            total += n
            if n < FORGET_CHUNK:
                return total

    def _aid(self, conn: sqlite3.Connection, job: str, attempt: int) -> int:
        key = (job, int(attempt))
        aid = self._aids.get(key)
        if aid is None:
            conn.execute("INSERT OR IGNORE INTO attempts (job, attempt) VALUES (?, ?)", key)
            aid = conn.execute("SELECT aid FROM attempts WHERE job = ? AND attempt = ?",
                               key).fetchone()[0]
            self._aids[key] = aid
        return aid

    def _string_ids(self, conn: sqlite3.Connection, strings: list[str]) -> np.ndarray:
        """A batch's string table -> the global ids of its strings (index with a column)."""
        ids = np.empty(len(strings), dtype=np.int64)
        for i, s in enumerate(strings):
            sid = self._sids.get(s)
            if sid is None:
                conn.execute("INSERT OR IGNORE INTO strings (s) VALUES (?)", (s,))
                sid = conn.execute("SELECT id FROM strings WHERE s = ?", (s,)).fetchone()[0]
                self._sids[s] = sid
            ids[i] = sid
        return ids

    def _put_ops(self, conn: sqlite3.Connection, aid: int, cols: Columns) -> None:
        n = len(cols)
        if n == 0:
            return
        gid = self._string_ids(conn, cols.strings)
        rank, pg, op = cols["rank"], gid[cols["pg"]], gid[cols["op"]]
        peer, seq = cols["peer"], cols["seq"]
        # In key order, rows land on neighbouring pages: far fewer pages touched per commit
        # (lexsort is stable: of two rows with one key, the later still comes later). The key
        # leads with seq, which grows with time for every rank, so a commit appends near the
        # end of the table: with rank first, a commit of 16,384 ranks' newest calls dirtied a
        # page per rank all over a table larger than the cache, and a 16k-rank job stored
        # ~35k rows/s instead of ~230k.
        order = np.lexsort((peer, rank, op, pg, seq))
        c = {k: v[order] for k, v in cols.columns.items()}
        errors = np.full(n, None, dtype=object)
        for row, text in cols.error_text.items():
            errors[row] = text
        conn.executemany(_UPSERT_OPS, zip(
            repeat(aid, n), rank[order].tolist(), pg[order].tolist(), op[order].tolist(),
            peer[order].tolist(), seq[order].tolist(), c["nbytes"].tolist(),
            gid[c["dtype"]].tolist(), c["t_enter_ns"].tolist(), c["t_start_ns"].tolist(),
            c["t_end_ns"].tolist(), c["status"].tolist(), errors[order].tolist(), strict=True))
        first = int(c["t_enter_ns"].min())
        last = int(max(c["t_enter_ns"].max(), c["t_end_ns"].max()))
        conn.execute(
            "UPDATE attempts SET first_ns = CASE WHEN first_ns = 0 THEN ?1 ELSE min(first_ns, ?1)"
            " END, last_ns = max(last_ns, ?2) WHERE aid = ?3", (first, last, aid))

    def _put_conns(self, conn: sqlite3.Connection, aid: int, cols: Columns) -> None:
        n = len(cols)
        if n == 0:
            return
        c = cols.columns
        gid = self._string_ids(conn, cols.strings)
        conn.executemany(
            "INSERT OR REPLACE INTO conns (aid, " + _CONN_SELECT + ") "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            zip(repeat(aid, n), c["rank"].tolist(), gid[c["local"]].tolist(),
                gid[c["remote"]].tolist(), *(c[k].tolist() for k in list(CONN_COLUMNS)[3:]),
                strict=True))

    def put_fault(self, report: FaultReport) -> None:
        if not report.id:
            raise StoreError("a fault report needs an id to be stored; the daemon assigns one")
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO faults (id, job, state, revision, first_seen_ns, body) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET job = excluded.job, "
                "state = excluded.state, revision = excluded.revision, "
                "first_seen_ns = excluded.first_seen_ns, body = excluded.body "
                "WHERE excluded.revision >= faults.revision",
                (report.id, report.job, report.state, int(report.revision),
                 int(report.first_seen_ns), _common.fault_to_text(report)))

    def put_host(self, record: HostRecord) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO hosts (host, t_ns, internals, digest, sidecar) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (host) DO UPDATE SET t_ns = excluded.t_ns, "
                "internals = excluded.internals, digest = excluded.digest, "
                "sidecar = excluded.sidecar WHERE excluded.t_ns >= hosts.t_ns",
                (record.host, int(record.t_ns), record.internals, record.digest,
                 record.sidecar))

    def hosts(self) -> list[HostRecord]:
        with self._reading() as conn:
            rows = conn.execute("SELECT host, t_ns, internals, digest, sidecar FROM hosts "
                                "ORDER BY host").fetchall()
        return [HostRecord(h, t, i, d or "", s or "") for h, t, i, d, s in rows]

    # -- reading -----------------------------------------------------------------------------

    @staticmethod
    def _find_attempt(conn: sqlite3.Connection, job: str, attempt: int | None) -> int | None:
        if attempt is None:
            row = conn.execute("SELECT aid FROM attempts WHERE job = ? ORDER BY attempt DESC "
                               "LIMIT 1", (job,)).fetchone()
        else:
            row = conn.execute("SELECT aid FROM attempts WHERE job = ? AND attempt = ?",
                               (job, attempt)).fetchone()
        return row[0] if row else None

    def _lookup_names(self, conn: sqlite3.Connection, ids: np.ndarray) -> list[str]:
        missing = [int(i) for i in ids if int(i) not in self._names]
        if missing:
            marks = ",".join("?" * len(missing))
            self._names.update(conn.execute(
                f"SELECT id, s FROM strings WHERE id IN ({marks})", missing).fetchall())
        return [self._names[int(i)] for i in ids]

    def _to_columns(self, conn: sqlite3.Connection, table: np.ndarray,
                    spec: dict[str, np.dtype], string_columns: Sequence[str]) -> Columns:
        """Integer rows (one column per ``spec`` entry, in order) -> Columns whose string
        columns index a fresh table of just the strings in use."""
        n = len(table)
        out = {k: table[:, i].astype(dt) for i, (k, dt) in enumerate(spec.items())
               if k not in string_columns}
        names = list(spec)
        ids = np.concatenate([table[:, names.index(k)] for k in string_columns])
        # ids are dense and few: a lookup table beats np.unique's sort
        lut = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=np.int64)
        lut[ids] = 1
        uniq = np.flatnonzero(lut)
        lut[uniq] = np.arange(len(uniq))
        inverse = lut[ids].astype(np.uint32)
        for j, k in enumerate(string_columns):
            out[k] = inverse[j * n:(j + 1) * n]
        return Columns({k: out[k] for k in names}, self._lookup_names(conn, uniq))

    @staticmethod
    def _fetch_ints(conn: sqlite3.Connection, sql: str, args: Sequence[object],
                    width: int) -> np.ndarray:
        return np.array(conn.execute(sql, args).fetchall(), dtype=np.int64).reshape(-1, width)

    def ops(self, job: str, attempt: int | None = None, *, rank: int | None = None,
            pg: str | None = None, limit: int = 0) -> Columns:
        names = list(OP_COLUMNS)
        with self._reading() as conn:
            aid = self._find_attempt(conn, job, attempt)
            if aid is None:
                return empty_columns(OP_COLUMNS)
            where = " WHERE aid = ?"
            args: list[object] = [aid]
            if rank is not None:
                where += " AND rank = ?"
                args.append(rank)
            if pg is not None:
                where += " AND pg = (SELECT id FROM strings WHERE s = ?)"
                args.append(pg)
            # whole-attempt reads scan the table in key order and sort in numpy, which is
            # twice as fast as walking the time index; a limit walks the index
            sql = f"SELECT {_OP_SELECT}, error IS NOT NULL FROM ops" + where
            if limit > 0:
                sql += f" ORDER BY t_enter_ns, rank, seq LIMIT {int(limit)}"
            table = self._fetch_ints(conn, sql, args, len(names) + 1)
            table = table[np.lexsort((table[:, names.index("seq")],
                                      table[:, names.index("rank")],
                                      table[:, names.index("t_enter_ns")]))]
            cols = self._to_columns(conn, table[:, :-1], OP_COLUMNS, _common.OP_STRING_COLUMNS)
            flagged = np.flatnonzero(table[:, -1])
            if len(flagged):
                key_at = [names.index(k) for k in _OP_KEY]
                texts = {tuple(row[:-1]): row[-1] for row in conn.execute(
                    f"SELECT {', '.join(_OP_KEY)}, error FROM ops{where} AND error IS NOT NULL",
                    args)}
                cols.error_text = {int(i): texts[tuple(table[i, key_at].tolist())]
                                   for i in flagged}
            return cols

    def count_ops(self, job: str, attempt: int | None = None) -> int:
        with self._reading() as conn:
            aid = self._find_attempt(conn, job, attempt)
            if aid is None:
                return 0
            return conn.execute("SELECT count(*) FROM ops WHERE aid = ?", (aid,)).fetchone()[0]

    def conns(self, job: str, attempt: int | None = None) -> Columns:
        with self._reading() as conn:
            aid = self._find_attempt(conn, job, attempt)
            if aid is None:
                return empty_columns(CONN_COLUMNS)
            table = self._fetch_ints(
                conn, f"SELECT {_CONN_SELECT} FROM conns WHERE aid = ? ORDER BY t_ns, rank",
                (aid,), len(CONN_COLUMNS))
            return self._to_columns(conn, table, CONN_COLUMNS, _common.CONN_STRING_COLUMNS)

    def batches(self, job: str, attempt: int | None = None, *,
                kinds: Sequence[str] | None = None) -> list[StoredBatch]:
        with self._reading() as conn:
            aid = self._find_attempt(conn, job, attempt)
            if aid is None:
                return []
            sql = "SELECT kind, count, t_lo, t_hi, body FROM batches WHERE aid = ?"
            args: list[object] = [aid]
            if kinds is not None:
                sql += f" AND kind IN ({','.join('?' * len(kinds))})"
                args.extend(kinds)
            rows = conn.execute(sql + " ORDER BY t_lo, id", args).fetchall()
        return [StoredBatch(k, n, lo, hi, bytes(body)) for k, n, lo, hi, body in rows]

    def details(self, job: str, fault_id: str | None = None) -> list[StoredDetail]:
        sql = ("SELECT d.fault_id, a.job, a.attempt, d.host, d.count, d.body FROM details d "
               "JOIN attempts a USING (aid) WHERE a.job = ?")
        args: list[object] = [job]
        if fault_id is not None:
            sql += " AND d.fault_id = ?"
            args.append(fault_id)
        with self._reading() as conn:
            rows = conn.execute(sql + " ORDER BY d.id", args).fetchall()
        return [StoredDetail(f, j, a, h, n, bytes(b)) for f, j, a, h, n, b in rows]

    def ranks(self, job: str, attempt: int | None = None) -> list[RankRecord]:
        with self._reading() as conn:
            aid = self._find_attempt(conn, job, attempt)
            rows = [] if aid is None else conn.execute(
                "SELECT a.job, a.attempt, r.rank, r.world_size, r.host, r.local_rank, r.pid, "
                "r.gpu, r.nic, r.backend, r.t_ns, r.cuda_device FROM ranks r "
                "JOIN attempts a USING (aid) "
                "WHERE aid = ? ORDER BY r.rank", (aid,)).fetchall()
        return [RankRecord(*row) for row in rows]

    def groups(self, job: str, attempt: int | None = None) -> list[GroupRecord]:
        with self._reading() as conn:
            aid = self._find_attempt(conn, job, attempt)
            rows = [] if aid is None else conn.execute(
                "SELECT a.job, a.attempt, g.pg, g.ranks, g.description FROM pgroups g "
                "JOIN attempts a USING (aid) WHERE aid = ? ORDER BY g.pg", (aid,)).fetchall()
        return [GroupRecord(j, a, pg, tuple(json.loads(r)), d) for j, a, pg, r, d in rows]

    def jobs(self) -> list[JobRecord]:
        with self._reading() as conn:
            rank_rows = conn.execute(
                "SELECT a.job, a.attempt, max(r.world_size), count(*), "
                "min(CASE WHEN r.t_ns > 0 THEN r.t_ns END), max(r.t_ns) "
                "FROM ranks r JOIN attempts a USING (aid) GROUP BY aid").fetchall()
            host_rows = conn.execute(
                "SELECT DISTINCT a.job, a.attempt, r.host FROM ranks r JOIN attempts a "
                "USING (aid)").fetchall()
            op_rows = conn.execute(
                "SELECT a.job, a.attempt, (SELECT count(*) FROM ops o WHERE o.aid = a.aid), "
                "a.first_ns, a.last_ns FROM attempts a "
                "WHERE EXISTS (SELECT 1 FROM ranks r WHERE r.aid = a.aid)").fetchall()
        hosts: dict[tuple[str, int], set[str]] = {}
        for job, attempt, host in host_rows:
            hosts.setdefault((job, attempt), set()).add(host)
        ranks = {(j, a): _common.RankAgg(w, n, hosts.get((j, a), set()), lo or 0, hi or 0)
                 for j, a, w, n, lo, hi in rank_rows}
        ops = {(j, a): _common.OpAgg(n, lo, hi) for j, a, n, lo, hi in op_rows}
        return _common.build_jobs(ranks, ops)

    def job_seen(self) -> dict[str, int]:
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT a.job, max(a.seen_ns) FROM attempts a WHERE EXISTS "
                "(SELECT 1 FROM ranks r WHERE r.aid = a.aid) GROUP BY a.job").fetchall()
        return {job: int(t) for job, t in rows}

    def get_fault(self, fault_id: str) -> FaultReport | None:
        with self._reading() as conn:
            row = conn.execute("SELECT body FROM faults WHERE id = ?", (fault_id,)).fetchone()
        return _common.fault_from_text(row[0]) if row else None

    def list_faults(self, job: str | None = None, *, open_only: bool = False,
                    limit: int = 0) -> list[FaultReport]:
        where, args = _fault_filter(job, open_only)
        sql = f"SELECT body FROM faults WHERE {where} ORDER BY first_seen_ns DESC, id"
        if limit > 0:
            sql += f" LIMIT {int(limit)}"
        with self._reading() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [_common.fault_from_text(r[0]) for r in rows]

    def count_faults(self, job: str | None = None, *, open_only: bool = False) -> int:
        where, args = _fault_filter(job, open_only)
        with self._reading() as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM faults WHERE {where}",
                                    args).fetchone()[0])


def _fault_filter(job: str | None, open_only: bool) -> tuple[str, list[object]]:
    """The WHERE clause (and its arguments) that picks a job's faults, or the open ones."""
    where: list[str] = ["1"]
    args: list[object] = []
    if job is not None:
        where.append("job = ?")
        args.append(job)
    if open_only:
        where.append("state = 'open'")
    return " AND ".join(where), args
