"""Helpers for the collector tests: a real frame-receiving Unix socket server, free ports, and
launching real gloo ranks as subprocesses."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from c4.processes import free_port
from c4.proto import c4_pb2
from c4.proto.codec import decode_ops
from collectors.wire import decode_frames

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@dataclass
class FrameSink:
    """Accepts collector connections on a Unix socket and keeps every decoded frame."""

    path: Path
    frames: list[tuple[int, c4_pb2.IngestRequest]] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(64)
        self._stop = False
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                cid = self.connections
                self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn, cid), daemon=True).start()

    def _read(self, conn: socket.socket, cid: int) -> None:
        buf = bytearray()
        with conn:
            while True:
                try:
                    chunk = conn.recv(1 << 16)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                msgs = decode_frames(buf)
                with self._lock:
                    self.frames.extend((cid, m) for m in msgs)

    def close(self) -> None:
        """Stop listening and drop every connection, as a sidecar that exits would."""
        self._stop = True
        self._server.close()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def of_kind(self, kind: str) -> list[c4_pb2.IngestRequest]:
        with self._lock:
            return [m for _, m in self.frames if m.WhichOneof("body") == kind]

    def op_rows(self) -> list[dict]:
        """Every op row received, one dict per row, with strings resolved."""
        rows: list[dict] = []
        for msg in self.of_kind("ops"):
            cols = decode_ops(msg.ops)
            names = {c: cols.names(c) for c in ("pg", "op", "dtype")}
            for i in range(len(cols)):
                row = {name: int(cols[name][i]) for name in cols.columns}
                row.update({c: str(names[c][i]) for c in names})
                row["job"], row["attempt"] = msg.ops.job, msg.ops.attempt
                row["error"] = cols.error_text.get(i, "")
                rows.append(row)
        return rows


def launch_ranks(script: Path, world: int, env_extra: dict[str, str], args: list[str],
                 prefix: list[str] | None = None) -> list[subprocess.Popen]:
    """Start ``world`` ranks of ``script`` (RANK/WORLD_SIZE/MASTER_* in the environment)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ)
        env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
        env.update(env_extra)
        cmd = [*(prefix or []), PYTHON, str(script), *args]
        procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def wait_ranks(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """Wait for every rank; fail with their output if one fails or they take too long."""
    outputs = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("ranks did not finish in time") from None
        outputs.append(out)
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, f"a rank failed (exit {p.returncode}):\n{out}"
    return outputs
