"""The SQLite store's memory does not grow with the number of threads that read it."""

from __future__ import annotations

import threading

from diagnosis.store import OpRows, Write
from diagnosis.store.sqlite import MAX_READERS, SQLiteStore
from tests.diagnosis.store.store_builders import make_ops, ranks_of, writes_of


def test_readers_share_a_bounded_pool_of_connections(tmp_path) -> None:
    store = SQLiteStore(str(tmp_path / "c4.db"), synchronous="NORMAL")
    try:
        store.write(writes_of("sc", 1, ranks_of("j", 0, 8)))
        store.write([Write("sc", 100, OpRows("j", 0, make_ops(5000)))])
        barrier = threading.Barrier(3 * MAX_READERS)
        counts: list[int] = []
        errors: list[BaseException] = []

        def read() -> None:
            try:
                barrier.wait(10)  # every thread reads at once, each from a fresh thread
                counts.append(store.count_ops("j"))
                assert len(store.jobs()) == 1
            except BaseException as exc:  # reported below, with the thread's failure
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(3 * MAX_READERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        assert counts == [5000] * len(threads)
        # one writer connection plus at most MAX_READERS readers, however many threads read
        assert len(store._opened) <= MAX_READERS + 1
    finally:
        store.close()
