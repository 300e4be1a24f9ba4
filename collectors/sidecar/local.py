"""The sidecar's Unix socket, where the node's ranks deliver their frames."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path

from collectors.wire import FrameError, decode_frames
from proto import c4_pb2

log = logging.getLogger(__name__)

Handler = Callable[[c4_pb2.IngestRequest], None]


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True
    on_frame: Handler


class _Connection(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        buf = bytearray()
        conn: socket.socket = self.request
        while True:
            try:
                chunk = conn.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            try:
                frames = decode_frames(buf)
            except FrameError as exc:
                log.error("dropping a collector connection that sent a bad frame: %s", exc)
                return
            for frame in frames:
                try:
                    self.server.on_frame(frame)  # type: ignore[attr-defined]
                except Exception:
                    log.exception("could not take a frame from a collector")


class LocalListener:
    """Accepts collector connections on ``path`` and hands every frame to ``on_frame``."""

    def __init__(self, path: Path, on_frame: Handler) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            # A socket left by a previous sidecar (we are its only owner on this node).
            self.path.unlink()
        self._server = _Server(str(self.path), _Connection)
        self._server.on_frame = on_frame
        os.chmod(self.path, 0o666)  # ranks may run as another user than the sidecar
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="c4-local", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
