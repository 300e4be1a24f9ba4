"""A TCP relay in front of the daemon that can be cut, so "the daemon is down" without the
daemon process going away: its counters (records stored once, duplicates) stay exact over the
outage, while the sidecar sees what a dead daemon looks like (streams broken, connections
refused)."""

from __future__ import annotations

import contextlib
import socket
import threading


class Relay:
    def __init__(self, target_port: int, listen_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = listen_port
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._server: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        """Accept connections again."""
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and break the open ones."""
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def close(self) -> None:
        self.cut()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(1 << 16):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
