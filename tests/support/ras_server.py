"""A stand-in NCCL RAS server: RAS's line protocol over real TCP on loopback, answering status
questions with a given report (NCCL itself cannot run here; tests/gpu asks the real one)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable


class RasServer:
    """Speaks RAS's client protocol on a loopback port; replays one report (``report``: its
    text, or a function giving the text for each question)."""

    def __init__(self, report: str | Callable[[], str], json_ok: bool = True,
                 gather_s: float = 0.0) -> None:
        # gather_s: how long it takes to gather the report from the job's processes
        self.report, self.json_ok, self.gather_s = report, json_ok, gather_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[list[str]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as rf:
                said: list[str] = []
                self.seen.append(said)
                for raw in rf:
                    line = raw.decode().strip()
                    said.append(line)
                    if line.startswith("CLIENT PROTOCOL"):
                        conn.sendall(b"SERVER PROTOCOL 2\n")
                    elif line.startswith("TIMEOUT"):
                        conn.sendall(b"OK\n")
                    elif line == "SET FORMAT json":
                        conn.sendall(b"OK\n" if self.json_ok else
                                     b"ERROR: Unknown command SET\n")
                    elif line.endswith("STATUS"):
                        time.sleep(self.gather_s)
                        text = self.report() if callable(self.report) else self.report
                        conn.sendall(text.encode())
                        break

    def close(self) -> None:
        self.sock.close()
