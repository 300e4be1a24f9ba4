"""The sidecar's local socket: many collectors at once on one thread, frames split across
reads, a collector that sends garbage is dropped without harming the others, and connections
that hold the sidecar's memory (huge, stalled or too many unfinished frames) are closed, each
reason counted and logged at a bounded rate."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import threading

import pytest

from c4.proto import c4_pb2
from collectors.sidecar.intake import Peer
from collectors.sidecar.local import Limits, LocalListener
from collectors.wire import HEADER, encode_frame, parse_request
from tests.collectors.sidecar.harness import Car
from tests.support.services import free_port, wait_for


def _frame(rank: int) -> bytes:
    req = c4_pb2.IngestRequest()
    req.rank.rank = rank
    req.rank.job = "local"
    return encode_frame(req)


def _connect(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    return s


def _closed_by_peer(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def _send(s: socket.socket, data: bytes) -> None:
    """Send what the sidecar takes before it closes the connection."""
    with contextlib.suppress(OSError):
        s.sendall(data)


class _Frames:
    def __init__(self) -> None:
        self.got: list[int] = []
        self.peers: list[Peer] = []
        self._lock = threading.Lock()

    def __call__(self, peer: Peer, raw: bytes) -> None:
        frame = parse_request(raw)
        with self._lock:
            self.got.append(frame.rank.rank)
            self.peers.append(peer)


def test_many_collectors_split_frames_and_a_bad_one(tmp_path):
    frames = _Frames()
    path = tmp_path / "sidecar.sock"
    listener = LocalListener(path, frames)
    listener.start()
    threads_before = threading.active_count()
    try:
        conns = [_connect(path) for _ in range(300)]
        bad = _connect(path)
        bad.sendall(HEADER.pack(listener.limits.max_frame_bytes + 1))
        # every frame arrives in two pieces, the first ending inside the length header
        for rank, c in enumerate(conns):
            c.sendall(_frame(rank)[:2])
        for rank, c in enumerate(conns):
            c.sendall(_frame(rank)[2:] + _frame(rank + 1000))
        wait_for(lambda: len(frames.got) >= 600, 20, what="600 frames from 300 collectors")
        assert sorted(frames.got) == sorted([*range(300), *range(1000, 1300)])
        # the garbage sender is disconnected, the others stay connected
        assert _closed_by_peer(bad)
        conns[0].sendall(_frame(7))
        wait_for(lambda: frames.got.count(7) == 2, 10, what="a later frame on a kept connection")
        assert threading.active_count() == threads_before  # no thread per connection
        # every frame comes with its sender's credentials, as the kernel gave them
        assert {(p.uid, p.pid) for p in frames.peers} == {(os.geteuid(), os.getpid())}
        assert listener.closed == {"frame_too_large": 1}
        for c in [*conns, bad]:
            c.close()
    finally:
        listener.stop()
    assert not path.exists()


def test_socket_gets_the_mode_asked_for_never_world_writable_by_default(tmp_path):
    path = tmp_path / "s.sock"
    listener = LocalListener(path, _Frames())
    try:
        st = path.stat()
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
        assert st.st_uid == os.geteuid()
    finally:
        listener.stop()
    listener = LocalListener(path, _Frames(), mode=0o600)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        listener.stop()


def test_stalled_and_oversized_unfinished_frames_are_closed(tmp_path):
    frames = _Frames()
    path = tmp_path / "s.sock"
    listener = LocalListener(path, frames, limits=Limits(
        max_frame_bytes=4 << 20, max_buffered_bytes=5 << 20, frame_timeout_s=1.5))
    listener.start()
    try:
        good = _connect(path)
        stalled = _connect(path)
        stalled.sendall(HEADER.pack(1000) + b"x" * 10)  # and nothing more
        big_a, big_b = _connect(path), _connect(path)
        big_a.sendall(HEADER.pack(4 << 20) + b"y" * (3 << 20))
        wait_for(lambda: listener._buffered >= 3 << 20, 5, what="the first big frame buffered")
        _send(big_b, HEADER.pack(4 << 20) + b"z" * (5 << 19))  # over the 5 MiB budget
        assert _closed_by_peer(big_a, 1.0)  # it held the most
        assert listener.closed == {"buffer_budget": 1}
        assert _closed_by_peer(stalled)
        assert _closed_by_peer(big_b)
        good.sendall(_frame(1))
        wait_for(lambda: frames.got == [1], 5, what="a good frame after the closings")
        assert listener.closed == {"stalled": 2, "buffer_budget": 1}
        assert listener._buffered == 0
        good.close()
    finally:
        listener.stop()


def test_a_flood_of_bad_connections_is_logged_at_a_bounded_rate(tmp_path, caplog):
    path = tmp_path / "s.sock"
    listener = LocalListener(path, _Frames())
    listener.start()
    caplog.set_level(logging.WARNING, logger="collectors.sidecar.local")
    try:
        socks = []
        for _ in range(100):
            s = _connect(path)
            _send(s, HEADER.pack(1 << 30))
            socks.append(s)
        for s in socks:
            assert _closed_by_peer(s)
        assert listener.closed == {"frame_too_large": 100}
        lines = [r for r in caplog.records if "closing the connection" in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in lines]
        for s in socks:
            s.close()
    finally:
        listener.stop()


def test_connections_beyond_the_limit_are_closed_at_once(tmp_path):
    path = tmp_path / "s.sock"
    listener = LocalListener(path, _Frames(), limits=Limits(max_connections=5))
    listener.start()
    try:
        held = [_connect(path) for _ in range(5)]
        wait_for(lambda: listener.connections() == 5, 5, what="5 connections held")
        extra = _connect(path)
        assert _closed_by_peer(extra)
        assert listener.closed == {"too_many": 1}
        for s in [*held, extra]:
            s.close()
    finally:
        listener.stop()


@pytest.mark.network
def test_sidecar_closes_a_connection_announcing_a_huge_frame(tmp_path):
    car = Car(tmp_path, free_port()).start()
    try:
        s = _connect(car.sock)
        _send(s, HEADER.pack(40 << 20) + b"x" * (1 << 20))  # under the old 64 MiB limit
        assert _closed_by_peer(s)
        assert car.metric("c4_sidecar_closed_connections_total", reason="frame_too_large") == 1
    finally:
        car.stop()
