"""ClickHouse going away: every call raises a StoreError that says what to check, nothing is
acknowledged, and the store carries on once the server is back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from c4.report import FaultReport
from diagnosis.errors import StoreError
from diagnosis.store import OpRows, RankRecord, Write, open_store
from diagnosis.store.clickhouse import ClickHouseStore
from tests.diagnosis.store.store_builders import make_ops
from tests.support.clickhouse import (  # noqa: F401
    ClickHouseServer,
    clickhouse_server,
    clickhouse_url,
    free_port,
    running_clickhouse,
)

HINT = "check that clickhouse-server is running"


@pytest.fixture
def own_server() -> Iterator[ClickHouseServer]:
    """A server of this test's own, free to be stopped."""
    yield from running_clickhouse()


@pytest.mark.clickhouse
def test_outage_raises_then_recovers(own_server: ClickHouseServer):
    store = open_store(own_server.url())
    first = [Write("s", 1, RankRecord("j", 0, 0, 2, "h")), Write("s", 2, OpRows("j", 0,
                                                                                make_ops(100)))]
    assert store.write(first) == [False, False]
    own_server.stop(kill=True)  # a crash, not a shutdown

    later = Write("s", 3, OpRows("j", 0, make_ops(50, seq0=1000)))
    with pytest.raises(StoreError, match=HINT) as err:
        store.write([later])
    assert f"127.0.0.1:{own_server.tcp_port}" in str(err.value)
    with pytest.raises(StoreError, match=HINT):
        store.count_ops("j")
    with pytest.raises(StoreError, match=HINT):
        store.put_fault(FaultReport("error", (), 1, "rank 1 died", id="f", job="j"))
    with pytest.raises(StoreError, match=HINT):
        store.jobs()

    own_server.start()  # same ports, same data
    assert store.write([later, *first]) == [False, True, True]
    assert store.count_ops("j") == 150
    store.close()


def test_closed_port_fails_at_open():
    port = free_port()
    with pytest.raises(StoreError, match=f"127.0.0.1:{port}.*{HINT}"):
        open_store(f"clickhouse://default@127.0.0.1:{port}/c4")


@pytest.mark.clickhouse
def test_rows_stored_without_their_applied_mark_collapse_on_resend(
        clickhouse_url):  # noqa: F811 - the fixture imported above
    """A daemon that dies between inserting rows and marking the request applied: the sidecar
    resends, and the rows are not doubled."""
    store = open_store(clickhouse_url)
    assert isinstance(store, ClickHouseStore)
    body = OpRows("j", 0, make_ops(1000, seed=3))
    store._insert_bodies([RankRecord("j", 0, 0, 8, "h"), body])  # the crash: no applied mark
    assert store.write([Write("s", 1, body)]) == [False]
    assert store.count_ops("j") == 1000
    assert len(store.ops("j")) == 1000
    store.close()


def test_url_parsing():
    with pytest.raises(StoreError, match="database name"):
        ClickHouseStore("127.0.0.1", 1, database="bad-name; DROP")
    with pytest.raises(StoreError, match="clickhouse://"):
        ClickHouseStore.from_url("clickhouse:///nohost")


@pytest.mark.clickhouse
def test_background_merges_keep_what_final_reads(clickhouse_url):  # noqa: F811
    """Queries read with FINAL; once the server has merged the parts for real, the same rows
    (completed over open, the highest revision) must remain."""
    store = open_store(clickhouse_url)
    assert isinstance(store, ClickHouseStore)
    done = make_ops(300, seed=5)
    open_rows = make_ops(300, seed=5, done=False)
    store.write([Write("s", 1, RankRecord("j", 0, 0, 8, "h")), Write("s", 2, OpRows("j", 0, done))])
    store.write([Write("s", 3, OpRows("j", 0, open_rows))])
    store.write([Write("s", 2, OpRows("j", 0, done))])
    fault = FaultReport("comm_hang", (), 5, "dp.1 stuck", id="f", job="j", revision=4)
    store.put_fault(fault)
    store.put_fault(fault.with_updates(revision=2, summary="stale"))
    before = (store.ops("j"), store.list_faults())
    for table in ("ops", "faults", "applied", "ranks"):
        store._run(f"OPTIMIZE TABLE {table} FINAL", what="merge")
    rows = store._run("SELECT count(), countIf(t_end_ns = -1) FROM ops WHERE job = 'j'",
                      what="count without FINAL")
    assert rows == [(300, 0)], "the merge kept exactly the completed rows"
    after = (store.ops("j"), store.list_faults())
    assert after[1] == before[1] == [fault]
    assert all((after[0][k] == before[0][k]).all() for k in before[0].columns)
    assert (after[0]["t_end_ns"] != -1).all()
    store.close()


@pytest.mark.clickhouse
def test_unknown_user_is_named(clickhouse_server):  # noqa: F811
    port = clickhouse_server.tcp_port
    with pytest.raises(StoreError, match="check the user, password and database"):
        open_store(f"clickhouse://nobody:secret@127.0.0.1:{port}/c4")


@pytest.mark.clickhouse
def test_threads_share_a_bounded_pool_of_connections(clickhouse_url):  # noqa: F811
    import threading

    from diagnosis.store.clickhouse import MAX_CLIENTS

    store = open_store(clickhouse_url)
    try:
        store.write([Write("pool", 1, RankRecord("pool", 0, 0, 1, "n0"))])
        errors: list[BaseException] = []

        def read() -> None:
            try:
                assert any(j.job == "pool" for j in store.jobs())
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(3 * MAX_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        # a client per thread once kept a connection for every thread that ever read
        assert len(store._clients) <= MAX_CLIENTS
    finally:
        store.close()
