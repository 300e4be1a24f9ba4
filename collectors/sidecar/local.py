"""The sidecar's Unix socket, where the node's ranks deliver their frames.

One thread serves every collector connection through a selector: a node may run many ranks
(and a load test thousands), and a thread per connection would cost a stack and a scheduler
slot each for sockets that are idle almost all the time."""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from collectors.wire import FrameError, decode_frames
from proto import c4_pb2

log = logging.getLogger(__name__)

Handler = Callable[[c4_pb2.IngestRequest], None]

_RECV_BYTES = 1 << 20


class LocalListener:
    """Accepts collector connections on ``path`` and hands every frame to ``on_frame``."""

    def __init__(self, path: Path, on_frame: Handler) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            # A socket left by a previous sidecar (we are its only owner on this node).
            self.path.unlink()
        self._on_frame = on_frame
        self._listen = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listen.bind(str(self.path))
        os.chmod(self.path, 0o666)  # ranks may run as another user than the sidecar
        self._listen.listen(socket.SOMAXCONN)
        self._listen.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listen, selectors.EVENT_READ, None)
        # a self-pipe wakes the loop for stop() without a polling timeout
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="c4-local", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._wake_w.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _serve(self) -> None:
        while not self._stopping:
            for key, _ in self._selector.select():
                if key.fileobj is self._listen:
                    self._accept()
                elif key.fileobj is self._wake_r:
                    return
                else:
                    self._read(key.fileobj, key.data)  # type: ignore[arg-type]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: keep serving the others
                log.error("cannot accept a collector connection: %s", exc)
                return
            conn.setblocking(False)
            self._selector.register(conn, selectors.EVENT_READ, bytearray())

    def _read(self, conn: socket.socket, buf: bytearray) -> None:
        try:
            chunk = conn.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(conn)
            return
        buf += chunk
        try:
            frames = decode_frames(buf)
        except FrameError as exc:
            log.error("dropping a collector connection that sent a bad frame: %s", exc)
            self._close(conn)
            return
        for frame in frames:
            try:
                self._on_frame(frame)
            except Exception:
                log.exception("could not take a frame from a collector")

    def _close(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        conn.close()
