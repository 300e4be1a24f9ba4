"""Parse a trace's blocks in worker processes: JSON parsing is most of the cost of reading a trace,
and blocks are independent, so they parse in parallel while the caller consumes them in order."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from c4.errors import FormatError
from diagnosis.trace.reader import (
    ByteStream,
    Item,
    Skipped,
    drop_unknown,
    parse_block,
    read_blocks,
)


def default_workers() -> int:
    """Worker processes worth starting on this machine (one core is left to the engine)."""
    return max(0, min(4, (os.cpu_count() or 1) - 1))


def _parse(data: bytes, first: int, lines: int, source: str) -> tuple[str, Any]:
    # a FormatError does not survive pickling with its fields: send them back as values
    try:
        return "ok", list(parse_block(data, first, lines, source))
    except FormatError as exc:
        return "error", (str(exc), exc.source, exc.line, exc.field)


def read_blocks_parallel(fh: ByteStream, source: str, workers: int,
                         block_bytes: int = 4 << 20) -> Iterator[Item]:
    """Like ``read_trace`` on an open binary file, with ``workers`` parsing processes."""
    # unknown record types come back as markers, warned about here: once per type, and in
    # this process, where logging is configured
    return drop_unknown(_blocks(fh, source, workers, block_bytes), source)


def _blocks(fh: ByteStream, source: str, workers: int,
            block_bytes: int) -> Iterator[Item | Skipped]:
    pending: deque[Future] = deque()

    def drain(fut: Future) -> Iterator[Item | Skipped]:
        status, value = fut.result()
        if status == "error":
            message, src, line, field = value
            err = FormatError("", source=src, line=line, field=field)
            err.args = (message,)
            raise err
        yield from value

    with ProcessPoolExecutor(workers) as pool:
        try:
            for data, first, lines in read_blocks(fh, block_bytes, source):
                pending.append(pool.submit(_parse, data, first, lines, source))
                while len(pending) > 2 * workers:
                    yield from drain(pending.popleft())
            while pending:
                yield from drain(pending.popleft())
        finally:
            for fut in pending:
                fut.cancel()
