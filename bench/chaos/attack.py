"""Hostile local peers, each in its own process: forged collector statistics, and a flood of
connections that hold unfinished frames."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import socket
import time
from pathlib import Path

from collectors.wire import HEADER


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def forged_stats_frame(first: int, entries: int) -> bytes:
    """One stats frame claiming ``entries`` collectors (job "x", ranks first..), encoded by hand
    (protobuf objects for millions of entries would take the attacker minutes)."""
    parts = []
    for rank in range(first, first + entries):
        sub = b"\x0a\x01x\x10" + _varint(rank)                      # job="x", rank
        parts.append(b"\x42" + _varint(len(sub)) + sub)             # SidecarStats.collectors
    stats = b"".join(parts)
    req = b"\x3a" + _varint(len(stats)) + stats                      # IngestRequest.stats
    return HEADER.pack(len(req)) + req


def _forge(sock: str, entries: int, per_frame: int, out: str) -> None:
    from c4.proto import c4_pb2
    from collectors.wire import encode_frame

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    s.sendall(encode_frame(c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(
        job="forger", rank=0, world_size=1, host="node0"))))
    sent = 0
    with contextlib.suppress(OSError):
        for first in range(0, entries, per_frame):
            s.sendall(forged_stats_frame(first, min(per_frame, entries - first)))
            sent += min(per_frame, entries - first)
    Path(out).write_text(json.dumps({"entries": sent}))
    time.sleep(1.0)
    s.close()


def _flood(sock: str, duration_s: float, held: int, huge: int, out: str) -> None:
    """Waves of ``held`` connections each announcing a 15 MiB frame and sending 1 MiB of it,
    and ``huge`` announcing 1 GiB; a new wave every 5 s."""
    opened = closed_by_sidecar = 0
    end = time.monotonic() + duration_s
    chunk = b"\0" * (1 << 20)
    while time.monotonic() < end:
        wave = []
        for i in range(held + huge):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sock)
                s.settimeout(2)
                if i < held:
                    s.sendall(HEADER.pack(15 << 20) + chunk)
                else:
                    s.sendall(HEADER.pack(1 << 30))
            except OSError:
                closed_by_sidecar += 1
                s.close()
                continue
            opened += 1
            wave.append(s)
        time.sleep(max(0.0, min(5.0, end - time.monotonic())))
        for s in wave:
            s.settimeout(0)
            try:
                if s.recv(1 << 16) == b"":
                    closed_by_sidecar += 1
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                closed_by_sidecar += 1
            s.close()
    Path(out).write_text(json.dumps({"opened": opened, "closed_by_sidecar": closed_by_sidecar}))


class Attacker:
    def __init__(self, target, args: tuple, out: Path) -> None:
        self.out = out
        ctx = mp.get_context("spawn")
        self._proc = ctx.Process(target=target, args=(*args, str(out)), daemon=True)

    @classmethod
    def forged_stats(cls, sock: Path, entries: int, per_frame: int, workdir: Path) -> Attacker:
        return cls(_forge, (str(sock), entries, per_frame), workdir / "forge.json")

    @classmethod
    def flood(cls, sock: Path, duration_s: float, workdir: Path, held: int = 300,
              huge: int = 100) -> Attacker:
        return cls(_flood, (str(sock), duration_s, held, huge), workdir / "flood.json")

    def start(self) -> Attacker:
        self._proc.start()
        return self

    def result(self, timeout: float) -> dict:
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            return {"error": "did not finish"}
        return json.loads(self.out.read_text()) if self.out.exists() else {}
