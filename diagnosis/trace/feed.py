"""Stream a trace file through an Engine: the loop shared by ``c4 analyze`` and the benches."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from diagnosis.engine import ConnRecords, Engine
from diagnosis.report import FaultReport
from diagnosis.trace.order import OrderWatch, conn_visible_ns, time_ordered
from diagnosis.trace.parallel import read_blocks_parallel
from diagnosis.trace.reader import End, GroupInfo, Item, RankInfo, read_trace
from proto.codec import Columns

log = logging.getLogger(__name__)


@dataclass
class FeedStats:
    records: int = 0
    ops: int = 0
    conns: int = 0
    end_ns: int | None = None
    #: the trace was out of time order and was sorted before the engine saw it
    sorted: bool = False


class _OutOfOrder(Exception):
    def __init__(self, watch: OrderWatch, pos: int) -> None:
        super().__init__(pos)
        self.pos = pos
        self.why = (f"a record comes {watch.behind_ns / 1e9:.1f} s before one read earlier"
                    if watch.behind_ns else f"a call comes {watch.behind_calls} calls of its "
                    "communicator behind one read earlier")


def feed_trace(engine: Engine, path: str | Path, *,
               progress: Callable[[int], None] | None = None,
               block_bytes: int = 4 << 20, workers: int = 0,
               min_parallel_bytes: int = 64 << 20,
               stopped_after_ns: int | None = None) -> tuple[list[FaultReport], FeedStats]:
    """Feed every record of the trace to ``engine``, advancing its clock with the data after
    each block; return the final reports and what was read. ``progress`` gets bytes read;
    ``workers`` > 0 parses blocks in that many processes, for traces larger than
    ``min_parallel_bytes`` (below that, starting processes costs more than it saves).

    A trace without an ``end`` record stopped, as far as c4 can tell, at its last record, so a
    call still open there has waited for nothing yet. ``stopped_after_ns`` says how long after
    it recording stopped (what the operator knows: when the hung job was killed).

    A trace whose rows go back in time by more than a few seconds (per-rank logs one after the
    other, shuffled lines) is read again, sorted on disk, into a reset engine."""
    parallel = workers > 0 and Path(path).stat().st_size > max(4 * block_bytes,
                                                               min_parallel_bytes)
    try:
        stats = _feed(engine, path, progress, block_bytes, workers if parallel else 0, False)
    except _OutOfOrder as exc:
        log.warning("%s is not in time order (%s): sorting its records first", path, exc.why)
        if progress is not None:
            progress(-exc.pos)
        engine.reset()
        stats = _feed(engine, path, progress, block_bytes, workers if parallel else 0, True)
    return engine.finish(_end_of(engine, stats, path, stopped_after_ns)), stats


def _end_of(engine: Engine, stats: FeedStats, path: str | Path,
            stopped_after_ns: int | None) -> int | None:
    if stats.end_ns is not None:
        if stopped_after_ns is not None:
            log.warning("%s has an end record; the time given for when recording stopped is "
                        "not used", path)
        return stats.end_ns
    if stopped_after_ns is not None:
        return engine.now_ns + stopped_after_ns
    open_calls = engine.open_calls()
    if open_calls:
        log.warning("%s has no end record and %d calls were still open at its last record: c4 "
                    "cannot tell a hang from a recording stopped mid-call. If the job hung, say "
                    "how long after its last record recording stopped (c4 analyze "
                    "--stopped-after SECONDS), or write an end record", path, open_calls)
    return None


def _items(fh: BinaryIO, path: str | Path, block_bytes: int, workers: int) -> Iterator[Item]:
    if workers > 0:
        return read_blocks_parallel(fh, str(path), workers, block_bytes)
    return read_trace(fh, block_bytes=block_bytes, name=str(path))


def _feed(engine: Engine, path: str | Path, progress: Callable[[int], None] | None,
          block_bytes: int, workers: int, ordered: bool) -> FeedStats:
    stats = FeedStats(sorted=ordered)
    # ops and conns each in order; one may lag the other (a simulator or exporter writing
    # them in separate chunks), which the engine, keeping them apart, does not mind
    watch = None if ordered else OrderWatch()
    conn_watch = None if ordered else OrderWatch()
    last_pos = 0
    with open(path, "rb") as raw:
        # a gzip trace decompresses on the fly; progress follows the compressed bytes
        fh = gzip.GzipFile(fileobj=raw) if str(path).endswith(".gz") else raw
        items: Iterable[Item] = _items(fh, path, block_bytes, workers)
        if ordered:
            items = time_ordered(_counted(items, raw, progress))
        for item in items:
            if isinstance(item, Columns):
                if watch is not None and not watch.check_ops(item):
                    raise _OutOfOrder(watch, raw.tell())
                engine.add_ops(item)
                stats.ops += len(item)
            elif isinstance(item, ConnRecords):
                if conn_watch is not None and not conn_watch.check(conn_visible_ns(item)):
                    raise _OutOfOrder(conn_watch, raw.tell())
                engine.add_conns(item)
                stats.conns += len(item)
            elif isinstance(item, RankInfo):
                engine.add_rank(item.rank, item.host, item.gpu, item.nic)
            elif isinstance(item, GroupInfo):
                engine.add_group(item.pg, item.ranks)
            elif isinstance(item, End):
                stats.end_ns = item.t_ns
            stats.records += 1 if not isinstance(item, (Columns, ConnRecords)) else len(item)
            if ordered:
                # sorted batches: the file is read already; let the detectors look after each
                if isinstance(item, (Columns, ConnRecords)):
                    engine.advance(engine.now_ns)
                continue
            pos = raw.tell()
            if pos != last_pos:
                # a new block: let the detectors look at the data so far
                engine.advance(engine.now_ns)
                if progress is not None:
                    progress(pos - last_pos)
                last_pos = pos
    return stats


def _counted(items: Iterable[Item], raw: BinaryIO,
             progress: Callable[[int], None] | None) -> Iterator[Item]:
    """``items``, reporting the bytes read as they are consumed."""
    last = 0
    for item in items:
        yield item
        pos = raw.tell()
        if progress is not None and pos != last:
            progress(pos - last)
        last = pos
