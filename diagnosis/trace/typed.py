"""The trace reader's fast path: a block of telemetry lines decoded by ``msgspec`` into typed
records, one small struct per line with the fields the batches need, checked and converted in C.

This is the common block (op, conn, progress, linkstat and port lines only). Each struct
holds exactly the fields of its kind, typed as the format says; msgspec refuses a line with a
missing required field, a value of another type (``true`` or ``1.0`` for an integer, ``null``
for a required string), or a ``type`` that is not one of these kinds, and skips a field the
format does not name, as the general path does. A refused block, and one with a backslash
(escapes) in it, is read again by the general path (orjson into dicts), which reads other
record types, skips unknown ones and names the bad line and field; so a block read here gives
exactly the batches that path would, only faster (no dict per line, no lookup per field).
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_
from typing import Any

import msgspec

Int = int | None
Str = str | None


class _Record(msgspec.Struct, tag_field="type", gc=False):
    """A telemetry line; ``tag`` is its ``type``. Fields the format does not name are skipped,
    as the general path skips them (writers may add optional fields)."""


class Op(_Record, tag="op"):
    rank: int
    pg: str
    seq: int
    op: str
    bytes: int
    t_enter_ns: int
    t_start_ns: Int = None
    t_end_ns: Int = None
    peer: Int = None
    status: Str = None
    dtype: Str = None


class Conn(_Record, tag="conn"):
    src: int
    dst: int
    bytes: int
    t_start_ns: int
    t_end_ns: Int = None
    pg: Str = None
    seq: Int = None
    path: tuple[str, ...] | None = None
    retrans: Int = None


class Progress(_Record, tag="progress"):
    rank: int
    pg: str
    t_ns: int
    entered: Int = None
    completed: Int = None
    op: Str = None
    peer: Int = None


class LinkStat(_Record, tag="linkstat"):
    src: int
    dst: int
    t_ns: int
    window_ns: int
    pg: Str = None
    path: tuple[str, ...] | None = None
    transfers: Int = None
    bytes: Int = None
    busy_ns: Int = None
    max_ns: Int = None
    open: Int = None
    open_since_ns: Int = None
    retrans: Int = None


class Port(_Record, tag="port"):
    host: str
    nic: str
    t_ns: int
    state: str
    link_downed: Int = None
    symbol_errors: Int = None
    rcv_errors: Int = None
    xmit_discards: Int = None
    retrans: Int = None
    rx_bytes: Int = None
    tx_bytes: Int = None


#: the struct of each record kind, in the order a block yields its batches
STRUCTS: dict[str, type[_Record]] = {"op": Op, "conn": Conn, "progress": Progress,
                                     "linkstat": LinkStat, "port": Port}
_KIND = {cls: kind for kind, cls in STRUCTS.items()}
_COMMAS = bytes.maketrans(b"\n", b",")
_DECODER = msgspec.json.Decoder(list[Op | Conn | Progress | LinkStat | Port])


def decode_block(data: bytes, lines: int) -> dict[str, list[Any]] | None:
    """The records of a block of ``lines`` whole lines, by kind (in ``STRUCTS`` order, file
    order within a kind), or None where a line is not a telemetry record this path reads (the
    caller then reads the block the general way)."""
    if b"\\" in data:
        return None
    # one JSON array of the block's lines; a blank line leaves ",," and fails the decode
    text = data.translate(_COMMAS)
    body = memoryview(text)[:-1] if text.endswith(b",") else text
    try:
        recs = _DECODER.decode(b"".join((b"[", body, b"]")))
    except (msgspec.DecodeError, ValueError, RecursionError):   # ValueError: bad UTF-8
        return None
    if len(recs) != lines:                     # a line held two records ("{...},{...}")
        return None
    types = list(map(type, recs))
    present = set(types)
    if len(present) == 1:
        return {_KIND[types[0]]: recs}
    return {kind: list(compress(recs, map(is_, types, repeat(cls))))
            for kind, cls in STRUCTS.items() if cls in present}

