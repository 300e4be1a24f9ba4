"""Stream a trace file through an Engine: the loop shared by ``c4 analyze`` and the benches."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from diagnosis.engine import ConnRecords, Engine
from diagnosis.report import FaultReport
from diagnosis.trace.parallel import read_blocks_parallel
from diagnosis.trace.reader import End, GroupInfo, RankInfo, read_trace
from proto.codec import Columns


@dataclass
class FeedStats:
    records: int = 0
    ops: int = 0
    conns: int = 0
    end_ns: int | None = None


def feed_trace(engine: Engine, path: str | Path, *,
               progress: Callable[[int], None] | None = None,
               block_bytes: int = 4 << 20, workers: int = 0,
               min_parallel_bytes: int = 64 << 20) -> tuple[list[FaultReport], FeedStats]:
    """Feed every record of the trace to ``engine``, advancing its clock with the data after
    each block; return the final reports and what was read. ``progress`` gets bytes read;
    ``workers`` > 0 parses blocks in that many processes, for traces larger than
    ``min_parallel_bytes`` (below that, starting processes costs more than it saves)."""
    stats = FeedStats()
    last_pos = 0
    with open(path, "rb") as raw:
        # a gzip trace decompresses on the fly; progress follows the compressed bytes
        fh = gzip.GzipFile(fileobj=raw) if str(path).endswith(".gz") else raw
        if workers > 0 and Path(path).stat().st_size > max(4 * block_bytes, min_parallel_bytes):
            items = read_blocks_parallel(fh, str(path), workers, block_bytes)
        else:
            items = read_trace(fh, block_bytes=block_bytes, name=str(path))
        for item in items:
            if isinstance(item, Columns):
                engine.add_ops(item)
                stats.ops += len(item)
            elif isinstance(item, ConnRecords):
                engine.add_conns(item)
                stats.conns += len(item)
            elif isinstance(item, RankInfo):
                engine.add_rank(item.rank, item.host, item.gpu, item.nic)
            elif isinstance(item, GroupInfo):
                engine.add_group(item.pg, item.ranks)
            elif isinstance(item, End):
                stats.end_ns = item.t_ns
            stats.records += 1 if not isinstance(item, (Columns, ConnRecords)) else len(item)
            pos = raw.tell()
            if pos != last_pos:
                # a new block: let the detectors look at the data so far
                engine.advance(engine.now_ns)
                if progress is not None:
                    progress(pos - last_pos)
                last_pos = pos
    return engine.finish(stats.end_ns), stats
