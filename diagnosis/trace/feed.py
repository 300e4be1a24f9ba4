"""Stream a trace file through an Engine: the loop shared by ``c4 analyze`` and the benches."""

from __future__ import annotations

import gzip
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from c4.proto.codec import Columns
from c4.proto.health import HealthRecord
from c4.report import FaultReport
from diagnosis.engine import ConnRecords, Engine
from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords
from diagnosis.trace.order import OrderWatch, time_ordered, visible_ns
from diagnosis.trace.parallel import FileBlocks, read_blocks_parallel
from diagnosis.trace.reader import (
    Batch,
    ByteStream,
    End,
    GroupInfo,
    Item,
    Meta,
    RankInfo,
    read_trace,
)

log = logging.getLogger(__name__)

_BATCHES = (Columns, ConnRecords, ProgressRecords, LinkStatRecords, PortRecords)


@dataclass
class FeedStats:
    """What was read: records of every type, and rows of each kind of telemetry."""

    records: int = 0
    ops: int = 0
    conns: int = 0
    progress: int = 0
    linkstats: int = 0
    ports: int = 0
    end_ns: int | None = None
    #: the trace keeps the calls that c4.proto.sampling keeps at this factor (meta ``sample``)
    sample: int = 1
    #: the trace was out of time order and was sorted before the engine saw it
    sorted: bool = False
    #: meta records read (a trace made of several joined together has several)
    metas: int = 0
    #: the trace's health records (few: one per component every few seconds), kept for the
    #: causes joined to the reports (diagnosis/health/)
    health: list[HealthRecord] = field(default_factory=list)
    #: where each rank runs: (host, gpu, nic) ids as the rank records say
    places: dict[int, tuple[str, ...]] = field(default_factory=dict)


class _OutOfOrder(Exception):
    def __init__(self, watch: OrderWatch, pos: int) -> None:
        super().__init__(pos)
        self.pos = pos
        self.why = (f"a record comes {watch.behind_ns / 1e9:.1f} s before one read earlier"
                    if watch.behind_ns else f"a call comes {watch.behind_calls} calls of its "
                    "communicator behind one read earlier")


class ItemSink(Protocol):
    """Where ``feed_trace`` also hands the items it feeds."""

    def add(self, item: Item) -> None: ...

    def reset(self) -> None: ...


def feed_trace(engine: Engine, path: str | Path, *,
               progress: Callable[[int], None] | None = None,
               block_bytes: int = 4 << 20, workers: int = 0,
               min_parallel_bytes: int = 64 << 20,
               stopped_after_ns: int | None = None,
               keep: ItemSink | None = None) -> tuple[list[FaultReport], FeedStats]:
    """Feed every record of the trace to ``engine``, advancing its clock with the data after
    each block; return the final reports and what was read. ``progress`` gets bytes read;
    ``workers`` > 0 parses blocks in that many processes, for traces larger than
    ``min_parallel_bytes`` (below that, starting processes costs more than it saves).

    A trace without an ``end`` record stopped, as far as c4 can tell, at its last record, so a
    call still open there has waited for nothing yet. ``stopped_after_ns`` says how long after
    it recording stopped (what the operator knows: when the hung job was killed).

    A trace whose rows go back in time by more than a few seconds (per-rank logs one after the
    other, shuffled lines) is read again, sorted on disk, into a reset engine.

    ``keep`` also gets every item fed (and a reset when the trace is read again): a caller that
    needs the records too (the HTML report) reads the file once."""
    parallel = workers > 0 and Path(path).stat().st_size > max(4 * block_bytes,
                                                               min_parallel_bytes)
    try:
        stats = _feed(engine, path, progress, block_bytes, workers if parallel else 0, False,
                      keep)
    except _OutOfOrder as exc:
        log.warning("%s is not in time order (%s): sorting its records first", path, exc.why)
        if progress is not None:
            progress(-exc.pos)
        engine.reset()
        if keep is not None:
            keep.reset()
        stats = _feed(engine, path, progress, block_bytes, workers if parallel else 0, True,
                      keep)
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


def _items(raw: BinaryIO, path: str | Path, block_bytes: int,
           workers: int) -> tuple[Iterable[Item], Callable[[], int]]:
    """The trace's items, and how far into the file (``raw``) the items read so far reach."""
    gz = str(path).endswith(".gz")
    if workers > 0 and not gz:
        # the workers read the file themselves: this process, the engine's, only cuts it
        blocks = FileBlocks(path, workers, block_bytes)
        return blocks, lambda: blocks.pos
    # a gzip trace decompresses on the fly; progress follows the compressed bytes
    fh: ByteStream = gzip.GzipFile(fileobj=raw) if gz else raw
    if workers > 0:
        return read_blocks_parallel(fh, str(path), workers, block_bytes), raw.tell
    return read_trace(fh, block_bytes=block_bytes, name=str(path)), raw.tell


def _feed(engine: Engine, path: str | Path, progress: Callable[[int], None] | None,
          block_bytes: int, workers: int, ordered: bool, keep: ItemSink | None) -> FeedStats:
    stats = FeedStats(sorted=ordered)
    # each kind of telemetry in order; one may lag another (a simulator or exporter writing
    # them in separate chunks), which the engine, keeping them apart, does not mind
    watches: dict[type, OrderWatch] | None = None if ordered else {}
    last_pos = 0
    with open(path, "rb") as raw:
        items, tell = _items(raw, path, block_bytes, workers)
        if ordered:
            items = time_ordered(_counted(items, tell, progress))
        for item in items:
            if watches is not None and isinstance(item, _BATCHES):
                watch = watches.setdefault(type(item), OrderWatch())
                in_order = watch.check_ops(item) if isinstance(item, Columns) \
                    else watch.check(visible_ns(item))
                if not in_order:
                    raise _OutOfOrder(watch, tell())
            _add(engine, item, stats, path)
            if keep is not None:
                keep.add(item)
            if ordered:
                # sorted batches: the file is read already; let the detectors look after each
                if isinstance(item, _BATCHES):
                    engine.advance(engine.now_ns)
                continue
            pos = tell()
            if pos != last_pos:
                # a new block: let the detectors look at the data so far
                engine.advance(engine.now_ns)
                if progress is not None:
                    progress(pos - last_pos)
                last_pos = pos
    return stats


def _add(engine: Engine, item: Item, stats: FeedStats, path: str | Path) -> None:
    """Hand one item to the engine and count it."""
    if isinstance(item, _BATCHES):
        _add_batch(engine, item, stats)
        stats.records += len(item)
        return
    stats.records += 1
    if isinstance(item, RankInfo):
        engine.add_rank(item.rank, item.host, item.gpu, item.nic)
        stats.places[item.rank] = tuple(p for p in (item.host, item.gpu, item.nic) if p)
    elif isinstance(item, GroupInfo):
        engine.add_group(item.pg, item.ranks)
    elif isinstance(item, Meta):
        _meta(engine, item, stats, path)
    elif isinstance(item, End):
        stats.end_ns = item.t_ns
    elif isinstance(item, HealthRecord):
        stats.health.append(item)


def _add_batch(engine: Engine, item: Batch, stats: FeedStats) -> None:
    n = len(item)
    if isinstance(item, Columns):
        engine.add_ops(item)
        stats.ops += n
    elif isinstance(item, ConnRecords):
        engine.add_conns(item)
        stats.conns += n
    elif isinstance(item, ProgressRecords):
        engine.add_progress(item)
        stats.progress += n
    elif isinstance(item, LinkStatRecords):
        engine.add_linkstats(item)
        stats.linkstats += n
    else:
        engine.add_ports(item)
        stats.ports += n


def _meta(engine: Engine, meta: Meta, stats: FeedStats, path: str | Path) -> None:
    """The sampling factor of the trace. Traces joined together may have been sampled
    differently: a call is in every part only if each part's factor keeps it, which the least
    common multiple of the factors says (crc % lcm == 0 exactly when every crc % k == 0)."""
    sample = math.lcm(stats.sample, meta.sample)
    if stats.metas and meta.sample != stats.sample:
        log.warning("%s: meta records disagree on which calls the trace keeps (sample %d, then "
                    "%d): calls are judged as sampled at %d, the ones every part keeps", path,
                    stats.sample, meta.sample, sample)
    stats.metas += 1
    stats.sample = sample
    engine.set_sample(sample)


def _counted(items: Iterable[Item], tell: Callable[[], int],
             progress: Callable[[int], None] | None) -> Iterator[Item]:
    """``items``, reporting the bytes read as they are consumed."""
    last = 0
    for item in items:
        yield item
        pos = tell()
        if progress is not None and pos != last:
            progress(pos - last)
        last = pos
