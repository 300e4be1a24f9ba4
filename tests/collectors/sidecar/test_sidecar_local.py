"""The sidecar's local socket: many collectors at once on one thread, frames split across
reads, and a collector that sends garbage is dropped without harming the others."""

from __future__ import annotations

import socket
import threading

from collectors.sidecar.local import LocalListener
from collectors.wire import HEADER, MAX_FRAME, encode_frame
from proto import c4_pb2
from tests.support.services import wait_for


def _frame(rank: int) -> bytes:
    req = c4_pb2.IngestRequest()
    req.rank.rank = rank
    req.rank.job = "local"
    return encode_frame(req)


def _connect(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    return s


def test_many_collectors_split_frames_and_a_bad_one(tmp_path):
    got: list[int] = []
    lock = threading.Lock()

    def on_frame(frame: c4_pb2.IngestRequest) -> None:
        with lock:
            got.append(frame.rank.rank)

    path = tmp_path / "sidecar.sock"
    listener = LocalListener(path, on_frame)
    listener.start()
    threads_before = threading.active_count()
    try:
        conns = [_connect(path) for _ in range(300)]
        bad = _connect(path)
        bad.sendall(HEADER.pack(MAX_FRAME + 1))
        # every frame arrives in two pieces, the first ending inside the length header
        for rank, c in enumerate(conns):
            c.sendall(_frame(rank)[:2])
        for rank, c in enumerate(conns):
            c.sendall(_frame(rank)[2:] + _frame(rank + 1000))
        wait_for(lambda: len(got) >= 600, 20, what="600 frames from 300 collectors")
        assert sorted(got) == sorted([*range(300), *range(1000, 1300)])
        # the garbage sender is disconnected, the others stay connected
        bad.settimeout(5)
        assert bad.recv(1) == b""
        conns[0].sendall(_frame(7))
        wait_for(lambda: got.count(7) == 2, 10, what="a later frame on a kept connection")
        assert threading.active_count() == threads_before  # no thread per connection
        for c in [*conns, bad]:
            c.close()
    finally:
        listener.stop()
    assert not path.exists()
