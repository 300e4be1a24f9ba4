"""The writer bounds each commit's rows (a store turns a commit into Python objects, so the
daemon's memory follows its largest commit) and still stores and acknowledges everything, in
order, with a request larger than the bound going alone."""

from __future__ import annotations

import threading

from c4.proto.codec import decode_ops
from diagnosis.daemon.writer import Writer
from diagnosis.store import OpRows, Write, open_store
from tests.diagnosis.store.store_builders import ranks_of, writes_of
from tests.support.frames import op_batch
from tests.support.services import wait_for


class _Recording:
    """The real memory store, remembering the rows of every commit."""

    def __init__(self) -> None:
        self.store = open_store("memory://")
        self.commits: list[int] = []

    def write(self, writes):
        self.commits.append(sum(len(getattr(w.body, "cols", ())) for w in writes))
        return self.store.write(writes)


def test_commits_are_bounded_in_rows():
    rec = _Recording()
    rec.store.write(writes_of("reg", 1, ranks_of("w", 0, 2)))
    writer = Writer(rec, on_stored=lambda _w: None, max_commit_records=250)
    acked: list[int] = []
    lock = threading.Lock()

    def done(seq: int):
        def ack(_dup: bool) -> None:
            with lock:
                acked.append(seq)
        return ack

    sizes = [100] * 20 + [600] + [100] * 5
    for seq, n in enumerate(sizes, 1):   # queued before the writer starts: one deep backlog
        cols = decode_ops(op_batch("w", 0, range(seq * 1000, seq * 1000 + n)).ops)
        writer.submit(Write("s", seq, OpRows("w", 0, cols)), done(seq))
    writer.start()
    wait_for(lambda: len(acked) == len(sizes), 20, what="every request acknowledged")
    writer.stop()
    assert acked == list(range(1, len(sizes) + 1))
    assert max(c for c in rec.commits if c != 600) <= 250 and 600 in rec.commits
    assert rec.store.count_ops("w") == sum(sizes)
    rows, seconds = writer.throughput()
    assert rows == sum(rec.commits) == sum(sizes) and seconds > 0, \
        "the governor reads the store's throughput from every commit"
