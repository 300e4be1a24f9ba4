"""Feed a recorded trace to an engine the way the live daemon does, for regression tests on
real traces."""

from __future__ import annotations

from pathlib import Path

from c4.proto.codec import Columns
from c4.report import FaultReport
from diagnosis.engine import ConnRecords, Engine
from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords
from diagnosis.trace.reader import GroupInfo, Meta, RankInfo, read_trace

STEP_NS = 250_000_000   # the daemon's clock runs on while the data falls silent


def replay_live(engine: Engine, path: Path, tail_s: float = 0.0,
                step_ns: int = STEP_NS) -> list[FaultReport]:
    """Every report change while feeding ``path`` in small blocks, the clock advanced after
    each and, where the data falls silent, in steps of ``step_ns``; then ``tail_s`` on."""
    out: list[FaultReport] = []
    for item in read_trace(path, block_bytes=4096):
        if _register(engine, item):
            continue
        if isinstance(item, Columns | ConnRecords | LinkStatRecords):
            first = _first_ns(item)
            now = engine.now_ns
            while now and now + step_ns < first:
                now += step_ns
                out += engine.advance(now)
            if isinstance(item, Columns):
                engine.add_ops(item)
            elif isinstance(item, ConnRecords):
                engine.add_conns(item)
            else:
                engine.add_linkstats(item)
            out += engine.advance(engine.now_ns)
        elif isinstance(item, ProgressRecords):
            engine.add_progress(item)
        elif isinstance(item, PortRecords):
            engine.add_ports(item)
    now = engine.now_ns
    for _ in range(int(tail_s * 1e9) // step_ns):
        now += step_ns
        out += engine.advance(now)
    return out


def replay_visible(engine: Engine, path: Path, tail_s: float = 0.0,
                   step_ns: int = STEP_NS, open_after_ns: int = 500_000_000
                   ) -> list[FaultReport]:
    """Like :func:`replay_live` for a trace whose rows come as collectors ship them: the clock
    runs on to each row's arrival (its end; an open row ``open_after_ns`` after its entry, as
    collectors ship a call pending that long) before the row is added, so a call that ends
    late is seen waiting meanwhile."""
    out: list[FaultReport] = []
    for item in read_trace(path, block_bytes=1):
        if _register(engine, item):
            continue
        if isinstance(item, Columns):
            c = item.columns
            due = int(max(c["t_end_ns"].max(), c["t_enter_ns"].max() + open_after_ns))
            now = engine.now_ns
            while now and now + step_ns < due:
                now += step_ns
                out += engine.advance(now)
            engine.add_ops(item)
            out += engine.advance(max(engine.now_ns, due))
    now = engine.now_ns
    for _ in range(int(tail_s * 1e9) // step_ns):
        now += step_ns
        out += engine.advance(now)
    return out


def _first_ns(item: Columns | ConnRecords | LinkStatRecords) -> int:
    """When a block's data begins (a window: its start)."""
    if isinstance(item, Columns):
        return int(item.columns["t_enter_ns"].min())
    if isinstance(item, ConnRecords):
        return int(item.t_start_ns.min())
    return int((item.t_ns - item.window_ns).min())


def _register(engine: Engine, item: object) -> bool:
    """Hand a rank or group record, or the trace's sampling factor, to the engine; False for
    anything else."""
    if isinstance(item, Meta):
        engine.set_sample(item.sample)
    elif isinstance(item, RankInfo):
        engine.add_rank(item.rank, item.host, item.gpu, item.nic)
    elif isinstance(item, GroupInfo):
        engine.add_group(item.pg, item.ranks)
    else:
        return False
    return True
