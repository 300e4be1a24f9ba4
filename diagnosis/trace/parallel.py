"""Parse a trace's blocks in worker processes: JSON parsing is most of the cost of reading a trace,
and blocks are independent, so they parse in parallel while the caller consumes them in order.

A trace file is cut into blocks by offset and each worker reads its own blocks
(:class:`FileBlocks`): the caller's process, which runs the engine, neither reads the file nor
counts its lines, nor sends its bytes down a pipe. A stream that cannot seek (a gzip file, a
pipe) is read by the caller and its blocks sent to the workers (:func:`read_blocks_parallel`).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from c4.errors import FormatError
from diagnosis.trace.reader import (
    ByteStream,
    Item,
    Skipped,
    block_lines,
    block_spans,
    drop_unknown,
    parse_block,
    read_blocks,
)

#: what a worker sends back for one block: ("ok", its line count, its items), or ("error", 0,
#: the FormatError's message, source, line and field: the error does not survive pickling with
#: its fields)
_Parsed = tuple[str, int, Any]


#: blocks parsed ahead of the engine, per worker, besides ``LAG``: enough to carry the workers
#: through a detection pass (tenths of a second at thousands of GPUs, a block's parse ~60 ms),
#: which else leaves them idle with a full queue and the engine waiting for them afterwards.
#: Only the parsed columns wait here (the workers read the file): a few MB per block.
AHEAD = 8
#: how many blocks per worker the reading position runs ahead of the items handed out, as
#: with :func:`read_blocks_parallel` (see :class:`FileBlocks`)
LAG = 2


def default_workers() -> int:
    """Worker processes worth starting on this machine (one core is left to the engine)."""
    return max(0, min(4, (os.cpu_count() or 1) - 1))


def _parse(data: bytes, first: int, lines: int, source: str) -> _Parsed:
    try:
        return "ok", lines, list(parse_block(data, first, lines, source))
    except FormatError as exc:
        return "error", 0, (exc.message, exc.source, exc.line, exc.field)


def _parse_span(path: str, start: int, end: int, source: str) -> _Parsed:
    """The block of ``path`` from ``start`` to ``end``, its lines numbered from 1."""
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    try:
        lines = block_lines(data, 1, source)
    except FormatError as exc:
        return "error", 0, (exc.message, exc.source, exc.line, exc.field)
    return _parse(data, 1, lines, source)


def _unpack(parsed: _Parsed, first: int) -> tuple[int, list[Item | Skipped]]:
    """A worker's answer for the block whose first line is ``first``: its line count and items;
    line numbers, which the worker counted from ``first``, made the file's."""
    status, lines, value = parsed
    if status == "error":
        message, src, line, field = value
        raise FormatError(message, source=src, field=field,
                          line=None if line is None else line + first - 1)
    return lines, value


def read_blocks_parallel(fh: ByteStream, source: str, workers: int,
                         block_bytes: int = 4 << 20) -> Iterator[Item]:
    """Like ``read_trace`` on an open binary stream, with ``workers`` parsing processes."""
    # unknown record types come back as markers, warned about here: once per type, and in
    # this process, where logging is configured
    return drop_unknown(_blocks(fh, source, workers, block_bytes), source)


def _blocks(fh: ByteStream, source: str, workers: int,
            block_bytes: int) -> Iterator[Item | Skipped]:
    pending: deque[Future] = deque()
    with ProcessPoolExecutor(workers) as pool:
        try:
            for data, first, lines in read_blocks(fh, block_bytes, source):
                pending.append(pool.submit(_parse, data, first, lines, source))
                while len(pending) > LAG * workers:
                    yield from _unpack(pending.popleft().result(), 1)[1]
            while pending:
                yield from _unpack(pending.popleft().result(), 1)[1]
        finally:
            for fut in pending:
                fut.cancel()


class FileBlocks:
    """The items of the trace file ``path``, parsed by ``workers`` processes that each read
    their blocks from the file; iterate once. ``pos``: how far into the file reading has got
    when the last item was handed out; the feed lets the detectors look at the data each time
    it moves.

    ``pos`` is where :func:`read_blocks_parallel` would have read to: ``LAG`` blocks per
    worker past the block of the item (the file's end for the last blocks), whatever the
    blocks parsed ahead. So the detectors pass over the data when they did before the workers
    read the file themselves, and the reports stay those of that reader. (Passes after every
    block, as in one process, lose a true report at the end of a trace: see the note in
    this package's README.)

    The caller counts the lines of the blocks as they come back, in order, to number the
    lines that the workers name (bad records, unknown types)."""

    def __init__(self, path: str | Path, workers: int, block_bytes: int = 4 << 20,
                 source: str | None = None) -> None:
        self.path = str(path)
        self.source = self.path if source is None else source
        self.workers = max(1, workers)
        self.block_bytes = block_bytes
        self.pos = 0

    def __iter__(self) -> Iterator[Item]:
        return drop_unknown(self._items(), self.source)

    def _items(self) -> Iterator[Item | Skipped]:
        pending: deque[Future] = deque()
        ends: deque[int] = deque()      # of the pending blocks, in file order
        lag = LAG * self.workers
        first = 1

        def drain() -> list[Item | Skipped]:
            nonlocal first
            lines, items = _unpack(pending.popleft().result(), first)
            if any(isinstance(i, Skipped) for i in items):
                items = [Skipped(i.kind, i.line + first - 1) if isinstance(i, Skipped) else i
                         for i in items]
            first += lines
            self.pos = ends[min(lag, len(ends) - 1)]
            ends.popleft()
            return items

        with ProcessPoolExecutor(self.workers) as pool, open(self.path, "rb") as fh:
            try:
                for start, end in block_spans(fh, self.block_bytes):
                    pending.append(pool.submit(_parse_span, self.path, start, end,
                                               self.source))
                    ends.append(end)
                    while len(pending) > (AHEAD + LAG) * self.workers:
                        yield from drain()
                while pending:
                    yield from drain()
            finally:
                for fut in pending:
                    fut.cancel()
