"""Real sidecars and daemons for the sidecar tests, their metrics, and a rank driver that speaks
the acknowledged collector wire (numbered frames, kept until acknowledged, sent again after a
reconnection)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from c4.processes import Service, c4_command, free_port
from collectors.wire import decode_acks, encode_frame, read_available
from tests.support.frames import group_info, op_batch, rank_info
from tests.support.services import Samples, scrape, wait_for


class Car:
    """A ``c4 sidecar`` process with its metrics on a loopback port."""

    def __init__(self, workdir: Path, daemon_port: int, host: str = "node0", *,
                 spill: Path | None = None, sock: Path | None = None,
                 extra: Sequence[str] = (), name: str = "sidecar") -> None:
        self.workdir = workdir
        self.sock = sock or workdir / f"{name}.sock"
        self.spill = spill or workdir / f"{name}-spill"
        self.metrics_port = free_port()
        self.args = c4_command("sidecar", "--daemon", f"127.0.0.1:{daemon_port}", "--socket",
                               str(self.sock), "--host", host, "--spill-dir", str(self.spill),
                               "--metrics", f"127.0.0.1:{self.metrics_port}", *extra)
        self.name = name
        self.service: Service | None = None
        self.starts = 0

    def start(self) -> Car:
        self.starts += 1
        self.service = Service(self.args, self.workdir / f"{self.name}.log").start()
        wait_for(lambda: self.metrics(), 60, what=f"sidecar {self.name} serving metrics")
        return self

    def metrics(self) -> Samples:
        return scrape(self.metrics_port)

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics().get((name, tuple(sorted(labels.items()))), 0.0)

    def dropped(self) -> dict[str, float]:
        """Dropped records by reason."""
        return {dict(labels)["reason"]: v for (n, labels), v in self.metrics().items()
                if n == "c4_sidecar_dropped_records_total" and v}

    def kill(self) -> None:
        assert self.service is not None
        self.service.kill()

    def stop(self) -> int | None:
        return self.service.stop() if self.service is not None else None

    def output(self) -> str:
        return self.service.output() if self.service is not None else ""


class AckedRank:
    """One rank speaking the acknowledged wire: op frames carry (collector id, frame number),
    stay in ``unacked`` until the sidecar acknowledges them, and go again after reconnecting."""

    def __init__(self, path: Path, job: str, rank: int, world: int, host: str = "node0",
                 cid: str | None = None) -> None:
        self.path = path
        self.job, self.rank, self.world, self.host = job, rank, world, host
        self.cid = cid or f"test-{job}-{rank}-{os.getpid()}"
        self.fno = 0
        self.unacked: dict[int, bytes] = {}
        self.refused: dict[int, str] = {}
        self.acked = 0
        self.sent: list[int] = []     # every op seq handed to send_ops, once
        self.reconnects = 0
        self._sock: socket.socket | None = None
        self._inbox = bytearray()
        self._lock = threading.Lock()

    def _connect(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(self.path))
                s.settimeout(5)
                s.sendall(encode_frame(rank_info(self.job, self.rank, self.world, self.host)) +
                          encode_frame(group_info(self.job, "0", list(range(self.world)))))
                for fno in sorted(self.unacked):  # what the last sidecar may not have taken
                    s.sendall(self.unacked[fno])
                self._sock = s
                return
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def send_ops(self, seqs: range) -> None:
        with self._lock:
            self.fno += 1
            req = op_batch(self.job, self.rank, seqs)
            req.sidecar, req.seq = self.cid, self.fno
            frame = encode_frame(req)
            self.unacked[self.fno] = frame
            self.sent.extend(seqs)
            while True:
                try:
                    if self._sock is None:
                        self._connect()  # resends this frame too
                    else:
                        self._sock.sendall(frame)
                    break
                except OSError:
                    self._drop_connection()
            if self._read_acks():
                self._drop_connection()

    def _drop_connection(self) -> None:
        if self._sock is not None:
            self._read_acks()
            self._sock.close()
            self._sock = None
            self.reconnects += 1

    def _read_acks(self) -> bool:
        """Take the acknowledgements that arrived; True if the sidecar has gone away."""
        if self._sock is None:
            return False
        gone = not read_available(self._sock, self._inbox)
        for ack in decode_acks(self._inbox):
            if ack.code:
                self.refused[ack.seq] = ack.error
            for fno in [f for f in self.unacked if f <= ack.seq]:
                del self.unacked[fno]
            self.acked = max(self.acked, ack.seq)
        return gone

    def poll(self) -> int:
        """Read acknowledgements (reconnecting if the sidecar went away); frames unacked."""
        with self._lock:
            if self._sock is None:
                with contextlib.suppress(OSError):
                    self._connect(timeout=0.5)
            elif self._read_acks():
                self._drop_connection()
            return len(self.unacked)

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until every frame is acknowledged (reconnecting as needed)."""
        wait_for(lambda: self.poll() == 0, timeout, what=f"rank {self.rank}'s frames acked")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def stored_keys(client, job: str) -> list[tuple[int, int]]:
    cols = client.ops(job)
    return sorted(zip(cols["rank"].tolist(), cols["seq"].tolist()))
