"""The local wire between a rank's collector and its node's sidecar.

A Unix stream socket carrying frames: a 4-byte little-endian length, then one serialized
``c4.v1.IngestRequest`` whose body is ``rank``, ``group``, ``ops`` or ``stats`` (``sidecar`` and
``seq`` left empty: the sidecar numbers what it forwards). No torch here: the sidecar imports it.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from proto import c4_pb2

SOCKET_ENV = "C4_SIDECAR_SOCKET"
HEADER = struct.Struct("<I")
# A frame larger than this is a broken or hostile peer, not telemetry.
MAX_FRAME = 64 * 1024 * 1024


class FrameError(ValueError):
    """A frame that is too large or does not parse."""


def default_socket_path() -> Path:
    """Where collectors and the sidecar meet unless ``C4_SIDECAR_SOCKET`` says otherwise."""
    if os.environ.get(SOCKET_ENV):
        return Path(os.environ[SOCKET_ENV])
    runtime = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return Path(runtime) / "c4" / "sidecar.sock"


def encode_frame(request: c4_pb2.IngestRequest) -> bytes:
    payload = request.SerializeToString()
    return HEADER.pack(len(payload)) + payload


def decode_frames(buffer: bytearray) -> list[c4_pb2.IngestRequest]:
    """Take every complete frame off the front of ``buffer`` (which is consumed in place)."""
    out: list[c4_pb2.IngestRequest] = []
    pos = 0
    while len(buffer) - pos >= HEADER.size:
        (size,) = HEADER.unpack_from(buffer, pos)
        if size > MAX_FRAME:
            raise FrameError(f"frame of {size} bytes exceeds the {MAX_FRAME}-byte limit")
        if len(buffer) - pos - HEADER.size < size:
            break
        start = pos + HEADER.size
        msg = c4_pb2.IngestRequest()
        try:
            msg.ParseFromString(bytes(buffer[start:start + size]))
        except Exception as exc:  # protobuf raises DecodeError, a plain Exception subclass
            raise FrameError(f"frame does not parse as IngestRequest: {exc}") from exc
        out.append(msg)
        pos = start + size
    del buffer[:pos]
    return out
