"""The local wire between a rank's collector and its node's sidecar.

A Unix stream socket carrying frames: a 4-byte little-endian length, then one serialized
message. Collector to sidecar: ``c4.v1.IngestRequest`` whose body is ``rank``, ``group``, ``ops``
or ``stats``; in an ``ops`` frame ``sidecar`` holds the collector's id (one per process) and
``seq`` the frame's number (1, 2, ... per collector), elsewhere both are empty. The sidecar
numbers what it forwards itself.

Sidecar to collector: ``c4.v1.IngestAck`` frames. ``seq`` = n with ``code`` 0 says every ops
frame up to number n is taken (on disk in the sidecar's log, or dropped and counted there): the
collector keeps frames until then and sends the rest again after reconnecting, and the sidecar
recognizes those it already has. An empty ``IngestAck`` (seq 0), sent as soon as the sidecar
accepts a connection, says that it acknowledges at all. A non-zero ``code`` refuses frame
``seq`` for the reason in ``error`` (e.g. a job that another user's ranks own). A collector
that never reads them, or a sidecar that never sends them, works as before (no resend).
No torch here: the sidecar imports it.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

from c4.proto import c4_pb2

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


def encode_ack(ack: c4_pb2.IngestAck) -> bytes:
    payload = ack.SerializeToString()
    return HEADER.pack(len(payload)) + payload


def split_frames(buffer: bytearray, max_frame: int = MAX_FRAME) -> list[bytes]:
    """Take the payload of every complete frame off the front of ``buffer`` (consumed in
    place); raises ``FrameError`` for a frame announced larger than ``max_frame``."""
    out: list[bytes] = []
    pos = 0
    while len(buffer) - pos >= HEADER.size:
        (size,) = HEADER.unpack_from(buffer, pos)
        if size > max_frame:
            del buffer[:pos]
            raise FrameError(f"frame of {size} bytes exceeds the {max_frame}-byte limit")
        if len(buffer) - pos - HEADER.size < size:
            break
        start = pos + HEADER.size
        out.append(bytes(buffer[start:start + size]))
        pos = start + size
    del buffer[:pos]
    return out


# IngestRequest's body fields (proto/c4.proto): rank, group, ops, conns, stats
BODY_FIELDS = {3: "rank", 4: "group", 5: "ops", 6: "conns", 7: "stats"}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise FrameError("frame ends inside a varint")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def peek_body(payload: bytes) -> tuple[str, int]:
    """(kind, bytes) of an IngestRequest's body, read off the wire format without parsing it,
    so that an oversized body can be refused before it costs memory; ("", 0) if none."""
    pos = 0
    while pos < len(payload):
        key, pos = _varint(payload, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(payload, pos)
        elif wire == 2:
            length, pos = _varint(payload, pos)
            if field in BODY_FIELDS:
                return BODY_FIELDS[field], length
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise FrameError(f"frame holds a field of wire type {wire}")
    return "", 0


def parse_request(payload: bytes) -> c4_pb2.IngestRequest:
    msg = c4_pb2.IngestRequest()
    try:
        msg.ParseFromString(payload)
    except Exception as exc:  # protobuf raises DecodeError, a plain Exception subclass
        raise FrameError(f"frame does not parse as IngestRequest: {exc}") from exc
    return msg


def read_available(sock: socket.socket, into: bytearray) -> bool:
    """Append to ``into`` what ``sock`` has received, without waiting for more; False once the
    peer has closed the connection or it broke."""
    timeout = sock.gettimeout()
    sock.settimeout(0)  # with a timeout, recv would wait for data to arrive
    try:
        while True:
            try:
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            if not chunk:
                return False
            into += chunk
    finally:
        sock.settimeout(timeout)


def decode_frames(buffer: bytearray) -> list[c4_pb2.IngestRequest]:
    """Take every complete frame off the front of ``buffer`` (which is consumed in place)."""
    return [parse_request(p) for p in split_frames(buffer)]


def decode_acks(buffer: bytearray) -> list[c4_pb2.IngestAck]:
    """Take every complete acknowledgement off the front of ``buffer`` (consumed in place)."""
    out = []
    for payload in split_frames(buffer, 1 << 20):
        ack = c4_pb2.IngestAck()
        try:
            ack.ParseFromString(payload)
        except Exception as exc:
            raise FrameError(f"frame does not parse as IngestAck: {exc}") from exc
        out.append(ack)
    return out
