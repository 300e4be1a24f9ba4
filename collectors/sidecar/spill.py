"""A bounded on-disk spill of ingest requests, in segments replayed oldest first.

Each segment is a file of frames (collectors.wire framing) holding requests that already carry
their (sidecar, seq) identity, so a replay after any crash is recognized by the daemon as a
resend. A segment is deleted only once every request in it is acknowledged.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from collectors.wire import FrameError, decode_frames, encode_frame
from proto import c4_pb2

log = logging.getLogger(__name__)

SUFFIX = ".c4spill"


class Spill:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        existing = self.segments()
        self._next = max((int(p.stem) for p in existing), default=0) + 1
        self.bytes = sum(p.stat().st_size for p in existing)

    def segments(self) -> list[Path]:
        """Segment files, oldest first."""
        return sorted(self.dir.glob(f"*{SUFFIX}"), key=lambda p: int(p.stem))

    def append(self, requests: list[c4_pb2.IngestRequest]) -> int:
        """Write requests as one new segment; returns how many did not fit and were dropped."""
        frames: list[bytes] = []
        size = 0
        for req in requests:
            frame = encode_frame(req)
            if self.bytes + size + len(frame) > self.max_bytes:
                break
            frames.append(frame)
            size += len(frame)
        dropped = len(requests) - len(frames)
        if dropped:
            log.error("spill is full (%d bytes): dropping %d requests; raise --spill-max-bytes "
                      "or bring the daemon back", self.max_bytes, dropped)
        if frames:
            path = self.dir / f"{self._next:012d}{SUFFIX}"
            self._next += 1
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as fh:
                fh.write(b"".join(frames))
                fh.flush()
                os.fsync(fh.fileno())
            tmp.rename(path)  # a segment is whole or absent, never torn
            self.bytes += size
        return dropped

    def read(self, path: Path) -> list[c4_pb2.IngestRequest]:
        buf = bytearray(path.read_bytes())
        try:
            out = decode_frames(buf)
        except FrameError as exc:
            log.error("spill segment %s is corrupt (%s); keeping what parsed", path.name, exc)
            return []
        if buf:
            log.error("spill segment %s ends with %d bytes of a torn frame", path.name, len(buf))
        return out

    def remove(self, path: Path) -> None:
        try:
            size = path.stat().st_size
            path.unlink()
            self.bytes = max(0, self.bytes - size)
        except FileNotFoundError:
            pass
