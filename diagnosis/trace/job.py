"""A whole trace file held in memory: its calls, connection samples and rank placement, for
the views that draw a job (``c4 report --html``, ``c4 analyze --chrome-trace``) rather than
stream it through the detectors."""

from __future__ import annotations

from dataclasses import dataclass, field

from c4.proto.codec import OP_COLUMNS, Columns, concat, empty_columns
from diagnosis.engine import ConnRecords
from diagnosis.trace.reader import End, Item, Meta, RankInfo


@dataclass
class TraceJob:
    """What a trace holds about its job, collected by :meth:`add`: an ``ItemSink`` for
    ``feed_trace``, so that the detectors and this read the file once."""

    parts: list[Columns] = field(default_factory=list)
    conns: list[ConnRecords] = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)   # rank -> host
    gpus: dict[int, str] = field(default_factory=dict)
    nics: dict[int, str] = field(default_factory=dict)
    job: str | None = None
    end_ns: int | None = None          # the trace's end record: when recording stopped

    @property
    def ops(self) -> Columns:
        """Every op record, in the order read (concatenated once, on first use)."""
        if not self.parts:
            return empty_columns(OP_COLUMNS)
        if len(self.parts) > 1:
            self.parts = [concat(self.parts)]
        return self.parts[0]

    def add(self, item: Item) -> None:
        if isinstance(item, Columns):
            self.parts.append(item)
        elif isinstance(item, ConnRecords):
            self.conns.append(item)
        elif isinstance(item, RankInfo):
            self.hosts[item.rank] = item.host
            if item.gpu:
                self.gpus[item.rank] = item.gpu
            if item.nic:
                self.nics[item.rank] = item.nic
        elif isinstance(item, Meta):
            self.job = item.job
        elif isinstance(item, End):
            self.end_ns = item.t_ns

    def reset(self) -> None:
        """Forget everything: the trace is read again (sorted)."""
        self.parts, self.conns = [], []
        self.hosts, self.gpus, self.nics = {}, {}, {}
        self.job = self.end_ns = None
