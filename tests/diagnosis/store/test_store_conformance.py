"""One suite, every backend: SQLite (file and memory) and a real clickhouse-server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from c4.proto.codec import CONN_COLUMNS, OP_COLUMNS
from c4.report import FaultReport, Suspect
from diagnosis.errors import StoreError
from diagnosis.store import (
    BatchRows,
    ConnRows,
    DetailRows,
    GroupRecord,
    OpRows,
    RankRecord,
    RemovedJob,
    Store,
    Write,
    open_store,
)
from tests.diagnosis.store.store_builders import (
    OPS,
    PGS,
    T0,
    as_records,
    head,
    make_conns,
    make_ops,
    ranks_of,
    writes_of,
)
from tests.support.clickhouse import clickhouse_server, clickhouse_url  # noqa: F401

BACKENDS = ["sqlite", "sqlite-memory", "memory",
            pytest.param("clickhouse", marks=pytest.mark.clickhouse)]


@pytest.fixture(params=BACKENDS)
def opener(request: pytest.FixtureRequest, tmp_path) -> Iterator[Callable[[], Store]]:
    """Opens the backend under test; calling it again re-opens the same store (a restart)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/c4.db"
    elif request.param == "sqlite-memory":
        url = "sqlite://:memory:"
    elif request.param == "memory":
        url = "memory://"
    else:
        url = request.getfixturevalue("clickhouse_url")
    opened: list[Store] = []

    def open_it() -> Store:
        if opened and (url.endswith(":memory:") or url == "memory://"):
            pytest.skip("an in-memory store does not outlive its process")
        opened.append(open_store(url))
        return opened[-1]

    yield open_it
    for s in opened:
        s.close()


@pytest.fixture
def store(opener: Callable[[], Store]) -> Store:
    return opener()


def test_resend_after_restart_is_a_duplicate(opener):
    s = opener()
    first = writes_of("host-a", 1, [*ranks_of("j", 0, 4), OpRows("j", 0, make_ops(1000)),
                                    ConnRows("j", 0, make_conns(50))])
    assert s.write(first) == [False] * len(first)
    s.close()
    s = opener()  # the daemon restarted: the sidecar resends what it had no ack for
    more = Write("host-a", 100, OpRows("j", 0, make_ops(10, seq0=10_000)))
    assert s.write([*first, more]) == [True] * len(first) + [False]
    assert s.count_ops("j") == 1010
    assert len(s.conns("j")) == 50
    assert len(s.ranks("j")) == 4
    # the same seq from another sidecar is another request
    assert s.write([Write("host-b", 1, OpRows("j", 0, make_ops(5, rank0=100)))]) == [False]
    assert s.count_ops("j") == 1015


def test_duplicates_within_one_call(store):
    w = Write("host-a", 7, OpRows("j", 0, make_ops(100)))
    assert store.write([w, w, Write("host-a", 8, ranks_of("j", 0, 1)[0]), w]) == [
        False, True, False, True]
    assert store.count_ops("j") == 100
    assert store.write([]) == []


def test_open_row_is_replaced_by_completed_and_never_the_reverse(store):
    open_rows = make_ops(200, done=False, seed=1)
    done_rows = make_ops(200, done=True, seed=1)
    store.write([Write("s", 1, ranks_of("j", 0, 8)[0]), Write("s", 2, OpRows("j", 0, open_rows))])
    assert (store.ops("j")["t_end_ns"] == -1).all()
    store.write([Write("s", 3, OpRows("j", 0, done_rows))])
    got = store.ops("j")
    assert len(got) == 200 and store.count_ops("j") == 200
    assert as_records(got, OP_COLUMNS) == as_records(done_rows, OP_COLUMNS)
    # a late open copy (e.g. a resend from a restarted sidecar) loses to the completed row
    store.write([Write("s", 4, OpRows("j", 0, open_rows))])
    assert as_records(store.ops("j"), OP_COLUMNS) == as_records(done_rows, OP_COLUMNS)
    # both in one call, completed first: the open one still loses
    more_open = make_ops(50, done=False, seed=2, seq0=5000)
    more_done = make_ops(50, done=True, seed=2, seq0=5000)
    store.write([Write("s", 5, OpRows("j", 0, more_done)),
                 Write("s", 6, OpRows("j", 0, more_open))])
    assert store.count_ops("j") == 250
    assert (store.ops("j")["t_end_ns"] != -1).all()


def test_queries(store):
    ops = make_ops(600, seed=3)
    err = make_ops(3, seq0=9000, seed=4)
    err.columns["status"][:] = [2, 1, 0]
    err.error_text = {0: "NCCL error: unhandled system error", 1: "timeout after 600 s"}
    conns = make_conns(40, seed=5)
    bodies = [*ranks_of("j", 0, 8), *ranks_of("j", 1, 4, hosts=4),
              GroupRecord("j", 1, "dp.1", (3, 1, 2), "data parallel"),
              GroupRecord("j", 1, "0", (0, 1, 2, 3)),
              OpRows("j", 0, make_ops(30, seed=6)), OpRows("j", 1, ops), OpRows("j", 1, err),
              ConnRows("j", 1, conns)]
    assert store.write(writes_of("sc", 1, bodies)) == [False] * len(bodies)

    # latest attempt unless told
    assert [r.rank for r in store.ranks("j")] == [0, 1, 2, 3]
    assert store.ranks("j", 0) == ranks_of("j", 0, 8)
    assert store.ranks("j") == ranks_of("j", 1, 4, hosts=4)
    assert store.groups("j") == [GroupRecord("j", 1, "0", (0, 1, 2, 3)),
                                 GroupRecord("j", 1, "dp.1", (3, 1, 2), "data parallel")]
    assert store.groups("j", 0) == []
    assert store.count_ops("j") == 603 and store.count_ops("j", 0) == 30

    got = store.ops("j")
    assert as_records(got, OP_COLUMNS) == sorted(as_records(ops, OP_COLUMNS)
                                                 + as_records(err, OP_COLUMNS))
    key = np.lexsort((got["seq"], got["rank"], got["t_enter_ns"]))
    assert (key == np.arange(len(got))).all(), "ops are ordered by (t_enter_ns, rank)"
    assert {k: v.dtype for k, v in got.columns.items()} == OP_COLUMNS
    # a fresh table: each string in use once, none of the batches' unused ones ("bfloat16")
    assert sorted(got.strings) == sorted({"float32", *OPS, *PGS})
    by_status = {int(got["status"][r]): t for r, t in got.error_text.items()}
    assert by_status == {2: "NCCL error: unhandled system error", 1: "timeout after 600 s"}

    r3 = store.ops("j", rank=3)
    assert len(r3) == (ops["rank"] == 3).sum() + (err["rank"] == 3).sum()
    assert set(r3["rank"].tolist()) == {3}
    dp = store.ops("j", pg="dp.1")
    assert set(dp.names("pg").tolist()) == {"dp.1"}
    assert len(dp) == sum(1 for row in as_records(ops, OP_COLUMNS) + as_records(err, OP_COLUMNS)
                          if row[list(OP_COLUMNS).index("pg")] == "dp.1")
    both = store.ops("j", rank=3, pg="dp.1")
    assert len(both) > 0 and set(both["rank"].tolist()) == {3}
    first10 = store.ops("j", limit=10)
    assert as_records(first10, OP_COLUMNS) == as_records(head(got, 10), OP_COLUMNS)
    assert len(store.ops("j", pg="no-such-group")) == 0

    c = store.conns("j")
    assert as_records(c, CONN_COLUMNS) == as_records(conns, CONN_COLUMNS)
    assert (np.diff(c["t_ns"]) >= 0).all()
    assert {k: v.dtype for k, v in c.columns.items()} == CONN_COLUMNS
    assert len(store.conns("j", 0)) == 0

    assert store.ranks("unknown") == [] and store.groups("unknown") == []
    assert len(store.ops("unknown")) == 0 and store.count_ops("unknown") == 0
    assert len(store.conns("unknown")) == 0
    assert store.ops("unknown").columns.keys() == OP_COLUMNS.keys()


def test_jobs_summary(store):
    assert store.jobs() == []
    a = make_ops(100, seed=7)
    bodies = [*ranks_of("alpha", 0, 4), OpRows("alpha", 0, a),
              *ranks_of("beta", 0, 3),
              OpRows("gamma", 0, make_ops(5))]  # no rank registered: not listed
    later = [RankRecord("alpha", 1, 0, 4, "node9", t_ns=T0 + 10**12)]
    store.write(writes_of("s", 1, bodies + later))
    jobs = store.jobs()
    assert [(j.job, j.attempt) for j in jobs] == [("alpha", 1), ("alpha", 0), ("beta", 0)]
    a1, a0, b0 = jobs
    assert (a1.world_size, a1.ranks_seen, a1.hosts, a1.ops) == (4, 1, ("node9",), 0)
    assert a1.first_ns == a1.last_ns == T0 + 10**12
    assert (a0.world_size, a0.ranks_seen, a0.hosts, a0.ops) == (4, 4, ("node0", "node1"), 100)
    assert a0.first_ns == T0 - 10_000  # the first registration precedes the first op
    assert a0.last_ns == int(max(a["t_end_ns"].max(), a["t_enter_ns"].max()))
    assert (b0.ranks_seen, b0.ops, b0.hosts) == (3, 0, ("node0", "node1"))


def report(fid: str, revision: int, **kw) -> FaultReport:
    base = dict(
        kind="comm_slow",
        suspects=(Suspect("link", "sw1:p3-node2:eth0", 0.123456789),
                  Suspect("gpu", "node2/gpu1", 1 / 3, rank=5),
                  Suspect("rank", "7", 0.0, rank=7)),
        first_seen_ns=T0, summary="all_reduce on dp.1 runs 4x slower over sw1:p3",
        pg="dp.1", seq=0,
        evidence={"ratio": 4.25, "ranks": [1, 2], "nested": {"a": None, "b": [1.5, "x"]},
                  "unicode": "ü→"},
        id=fid, job="j", last_seen_ns=T0 + 5, state="open", revision=revision)
    base.update(kw)
    return FaultReport(**base)


def test_faults_round_trip_and_upsert_by_revision(store):
    r0 = report("f1", 0)
    store.put_fault(r0)
    assert store.get_fault("f1") == r0
    bare = report("f2", 0, pg=None, seq=None, evidence={}, suspects=(), kind="error",
                  first_seen_ns=T0 + 1, job="other")
    store.put_fault(bare)
    assert store.get_fault("f2") == bare
    assert store.get_fault("f2").seq is None and store.get_fault("f1").seq == 0

    r2 = report("f1", 2, last_seen_ns=T0 + 99, summary="worse")
    store.put_fault(r2)
    store.put_fault(report("f1", 1, summary="stale"))  # an older revision arriving late
    assert store.get_fault("f1") == r2
    store.put_fault(report("f3", 0, first_seen_ns=T0 + 2))
    assert [r.id for r in store.list_faults()] == ["f3", "f2", "f1"]
    assert [r.id for r in store.list_faults("j")] == ["f3", "f1"]
    assert [r.id for r in store.list_faults(limit=2)] == ["f3", "f2"]

    closed = r2.with_updates(state="resolved", revision=3)
    store.put_fault(closed)
    assert [r.id for r in store.list_faults(open_only=True)] == ["f3", "f2"]
    assert [r.id for r in store.list_faults("j", open_only=True, limit=1)] == ["f3"]
    assert store.list_faults("j")[1] == closed
    assert store.get_fault("nope") is None
    assert store.list_faults("nope") == []


def test_count_faults_counts_what_list_faults_lists(store):
    assert store.count_faults() == 0 and store.count_faults(open_only=True) == 0
    store.put_fault(report("f1", 0))
    store.put_fault(report("f2", 0, job="other", kind="error", first_seen_ns=T0 + 1))
    store.put_fault(report("f3", 0, first_seen_ns=T0 + 2))
    # f1 is resolved by a later revision, then an older open revision arrives late: the
    # count follows the latest revision, as the listing does
    store.put_fault(report("f1", 2, state="resolved"))
    store.put_fault(report("f1", 1))
    for job in (None, "j", "other", "nope"):
        for open_only in (False, True):
            listed = store.list_faults(job, open_only=open_only)
            assert store.count_faults(job, open_only=open_only) == len(listed), (job, open_only)
    assert store.count_faults() == 3 and store.count_faults(open_only=True) == 2
    assert store.count_faults("j", open_only=True) == 1


def test_large_batch_round_trip(store):
    cols = make_ops(100_000, seed=11, ranks=64)
    cols.columns["t_end_ns"][::7] = -1
    store.write([Write("s", 1, ranks_of("big", 0, 1)[0]), Write("s", 2, OpRows("big", 0, cols))])
    assert store.count_ops("big") == 100_000
    got = store.ops("big")
    assert as_records(got, OP_COLUMNS) == as_records(cols, OP_COLUMNS)
    assert (np.diff(got["t_enter_ns"]) > 0).all()


def test_one_writer_many_readers(store):
    store.write([Write("s", 0, ranks_of("j", 0, 1)[0])])
    failures: list[BaseException] = []
    seen: list[int] = []
    stop = threading.Event()

    def read() -> None:
        try:
            last = 0
            while not stop.is_set():
                n = store.count_ops("j")
                assert n >= last, "a reader saw the count go down"
                assert len(store.ops("j", limit=50)) >= min(n, 50), "rows went missing"
                last = n
                seen.append(n)
        except BaseException as exc:
            failures.append(exc)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for k in range(20):
            store.write([Write("s", 1 + k, OpRows("j", 0, make_ops(500, seq0=1000 * k)))])
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=60)
    assert not failures, failures
    assert store.count_ops("j") == 10_000
    assert seen, "the readers ran"


def test_bad_url_and_unwritable_path(tmp_path):
    with pytest.raises(StoreError, match="unknown store URL"):
        open_store("postgres://x")
    with pytest.raises(StoreError, match="directory exists"):
        open_store(f"sqlite:///{tmp_path}/missing/dir/c4.db")


def test_batches_and_details_round_trip_once(opener):
    s = opener()
    sched = [BatchRows("j", 0, "schedule", 1, T0 + 5, T0 + 5, b"\x08\x01" + bytes([v]))
             for v in range(3)]
    progress = BatchRows("j", 0, "progress", 40, T0 + 1, T0 + 9, bytes(range(256)) * 4)
    port = BatchRows("j", 0, "port", 2, T0, T0, b"port")
    detail = DetailRows("j", 0, "fault-1", "node3", 17, b"\x00detail\xff")
    writes = writes_of("car", 1, [*ranks_of("j", 0, 2), progress, port, *sched, detail])
    assert s.write(writes) == [False] * len(writes)
    assert s.write(writes[-3:]) == [True] * 3
    got = s.batches("j")
    assert [b.kind for b in got] == ["port", "progress", "schedule", "schedule", "schedule"]
    assert got[1].payload == progress.payload and (got[1].count, got[1].t_lo, got[1].t_hi) == \
        (40, T0 + 1, T0 + 9)
    assert [b.payload for b in s.batches("j", kinds=["schedule"])] == [b.payload for b in sched]
    assert s.batches("j", attempt=7) == [] and s.batches("nobody") == []
    (d,) = s.details("j")
    assert (d.fault_id, d.host, d.count, d.payload) == ("fault-1", "node3", 17, detail.payload)
    assert s.details("j", "fault-1") == [d] and s.details("j", "other") == []
    assert s.details("other") == []


def _fault(job: str, fid: str) -> FaultReport:
    return FaultReport(kind="comm_hang", suspects=(Suspect("rank", "3", 1.0, 3),), first_seen_ns=T0,
                       summary="s", id=fid, job=job)


def test_remove_job_takes_every_attempt_and_leaves_the_others(opener):
    s = opener()
    gone = [*ranks_of("gone", 0, 2), GroupRecord("gone", 0, "0", (0, 1)),
            OpRows("gone", 0, make_ops(100)), ConnRows("gone", 0, make_conns(5)),
            BatchRows("gone", 0, "progress", 1, T0, T0, b"p"),
            DetailRows("gone", 0, "f-gone", "node0", 1, b"d"), *ranks_of("gone", 1, 2)]
    kept = [*ranks_of("kept", 0, 2), OpRows("kept", 0, make_ops(10))]
    s.write(writes_of("car", 1, [*gone, *kept]))
    s.put_fault(_fault("gone", "f-gone"))
    s.put_fault(_fault("kept", "f-kept"))
    assert s.remove_job("gone") == RemovedJob("gone", 2, 1)
    assert [j.job for j in s.jobs()] == ["kept"] and set(s.job_seen()) == {"kept"}
    assert not len(s.ops("gone")) and s.ranks("gone") == [] and s.groups("gone") == []
    assert s.batches("gone") == [] and s.details("gone") == [] and not len(s.conns("gone"))
    assert [f.id for f in s.list_faults()] == ["f-kept"] and s.count_ops("kept") == 10
    assert s.remove_job("gone") == RemovedJob("gone", 0, 0)
    # the job may register again, under new requests
    assert s.write(writes_of("car", 100, ranks_of("gone", 0, 1))) == [False]
    assert {j.job for j in s.jobs()} == {"gone", "kept"}


def test_activity_and_forgetting_old_requests(opener):
    s = opener()
    t0 = time.time_ns()
    assert s.write(writes_of("car", 1, ranks_of("a", 0, 2))) == [False, False]
    mid = time.time_ns()
    assert s.write(writes_of("car", 10, ranks_of("b", 0, 2))) == [False, False]
    seen = s.job_seen()
    assert t0 <= seen["a"] <= mid <= seen["b"] <= time.time_ns()
    assert s.forget_applied(mid) == 2
    # a's requests are no longer recognised as stored; b's still are
    assert s.write(writes_of("car", 1, ranks_of("a", 0, 2))) == [False, False]
    assert s.write(writes_of("car", 10, ranks_of("b", 0, 2))) == [True, True]
    assert len(s.ranks("a")) == 2   # a registration stored again replaces itself
    s.close()
    try:
        s = opener()
    except pytest.skip.Exception:
        return
    assert s.job_seen()["b"] == seen["b"]


def test_host_internals_and_rank_devices_round_trip(opener):
    from diagnosis.store import HostRecord

    s = opener()
    ranks = [RankRecord("j", 0, r, 2, "n1", local_rank=r, gpu="", cuda_device=str(r + 4))
             for r in range(2)]
    s.write(writes_of("car", 1, ranks))
    assert [r.cuda_device for r in s.ranks("j")] == ["4", "5"]
    s.put_host(HostRecord("n2", T0 + 5, '{"host": "n2", "v": 2}', "d2", "car-n2"))
    s.put_host(HostRecord("n1", T0, '{"host": "n1"}', "d1", "car-n1"))
    s.put_host(HostRecord("n2", T0 + 1, '{"host": "n2", "v": 1}', "d1", "car-n2"))  # older
    got = s.hosts()
    assert [(h.host, h.t_ns, h.digest) for h in got] == [("n1", T0, "d1"), ("n2", T0 + 5, "d2")]
    assert got[1].internals == '{"host": "n2", "v": 2}' and got[1].sidecar == "car-n2"
    s.close()
    again = opener()      # skipped for in-memory stores
    assert [h.host for h in again.hosts()] == ["n1", "n2"]
    assert [r.cuda_device for r in again.ranks("j")] == ["4", "5"]


def test_sqlite_schema_3_gains_rank_devices_and_hosts(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    s = open_store(f"sqlite:///{path}")
    s.close()
    conn = sqlite3.connect(path)    # as a version-3 store left it: no device, no hosts
    conn.executescript("DROP TABLE hosts; DROP TABLE ranks; CREATE TABLE ranks (aid INTEGER "
                       "NOT NULL, rank INTEGER NOT NULL, world_size INTEGER, host TEXT, "
                       "local_rank INTEGER, pid INTEGER, gpu TEXT, nic TEXT, backend TEXT, "
                       "t_ns INTEGER, PRIMARY KEY (aid, rank)) WITHOUT ROWID; "
                       "PRAGMA user_version = 3;")
    conn.close()
    s = open_store(f"sqlite:///{path}")
    try:
        s.write(writes_of("car", 1, [RankRecord("j", 0, 0, 1, "n1", cuda_device="3")]))
        assert s.ranks("j")[0].cuda_device == "3" and s.hosts() == []
    finally:
        s.close()
