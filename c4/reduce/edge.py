"""The edge reducer: full per-call telemetry in, the reduced stream of trace format version 2
out (sampled op rows, ``progress`` and ``linkstat`` records), as the collectors and the node
sidecar produce it.

Usage, on a stream whose rows arrive roughly in completion order::

    red = EdgeReducer(sample=16, window_ns=1_000_000_000)
    kept = red.add_ops(ops)            # the op rows to ship now (sampled, and every error)
    red.add_transfers(transfers)
    out = red.advance(watermark_ns)    # progress and linkstat of the windows now closed
    ...
    out = red.flush(end_ns)            # everything up to the end of the stream

The watermark promises that no event before it is still to come. Windows that end at or before
it are closed and emitted; an event fed later for a closed window is counted late (``stats``)
and lands in the first open window. A call entered in window w that completes in w+3 arrives,
completed, after w closed; its entry must reach the reducer earlier, as an open row (collectors
ship a call pending for longer than ``C4_OPEN_AFTER`` once, open) or through
:meth:`observe_calls` (the simulator, which knows every call's entry in advance). So the
caller's watermark should lag the newest data by at least the time an open row takes to arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from c4.proto.codec import Columns
from c4.reduce.keys import Strings
from c4.reduce.linkstat import LINKSTAT_FIELDS, LinkStatReducer
from c4.reduce.progress import PROGRESS_FIELDS, ProgressReducer
from c4.reduce.sampling import kept_rows, take
from c4.reduce.windows import NO_END, Windows

DEFAULT_WINDOW_NS = 1_000_000_000


@dataclass
class Reduced:
    """The windowed records closed by one :meth:`EdgeReducer.advance` or ``flush``.

    ``progress`` columns: rank, pg, op (-1: a collective), peer (-1), t_ns, entered, completed
    (-1: none yet); ``linkstat`` columns: src, dst, pg (-1), t_ns, window_ns, transfers, bytes,
    busy_ns, max_ns, open, open_since_ns (-1), retrans (-1: not counted), path (the caller's
    path id, -1). String columns index ``strings`` (the reducer's table, shared by both)."""

    progress: Columns
    linkstat: Columns

    def __len__(self) -> int:
        return len(self.progress) + len(self.linkstat)


@dataclass
class ReduceStats:
    ops_in: int = 0
    ops_kept: int = 0
    transfers_in: int = 0
    progress_out: int = 0
    linkstat_out: int = 0
    #: events fed after their window was closed (the watermark ran ahead of the data)
    late_progress: int = 0
    late_transfers: int = 0


class EdgeReducer:
    """Streaming reducer for one node (or a whole job: keys carry the rank)."""

    def __init__(self, sample: int = 1, window_ns: int = DEFAULT_WINDOW_NS) -> None:
        if int(sample) < 1:
            raise ValueError(f"sampling factor must be at least 1, got {sample!r}")
        self.sample = int(sample)
        self.windows = Windows(int(window_ns))
        self.strings = Strings()
        self._progress = ProgressReducer(self.windows, self.strings)
        self._links = LinkStatReducer(self.windows, self.strings)
        self._closed = -NO_END     # the watermark windows have been closed up to
        self._ended = False
        self.stats = ReduceStats()

    @property
    def window_ns(self) -> int:
        return self.windows.window_ns

    def sample_ops(self, ops: Columns) -> Columns:
        """The rows of ``ops`` to ship (stateless): sampled calls and every row not ok."""
        mask = kept_rows(ops, self.sample)
        self.stats.ops_in += len(ops)
        self.stats.ops_kept += int(mask.sum())
        return ops if mask.all() else take(ops, mask)

    def observe_calls(self, ops: Columns) -> None:
        """Count the rows' entries and completions into progress, shipping nothing. Rows may
        run ahead of the watermark; feeding a call again is harmless."""
        self._check_open()
        self._progress.add(ops)

    def add_ops(self, ops: Columns) -> Columns:
        """Op rows as collected (completed, or open while in flight): counted into progress;
        returns the rows to ship."""
        self.observe_calls(ops)
        return self.sample_ops(ops)

    def add_transfers(self, rows: Columns) -> None:
        """Per-transfer rows (see :meth:`LinkStatReducer.add`)."""
        self._check_open()
        self.stats.transfers_in += len(rows)
        self._links.add(rows)

    def advance(self, watermark_ns: int) -> Reduced:
        """Close and return the windows that end at or before ``watermark_ns``."""
        self._check_open()
        if watermark_ns <= self._closed:
            return self._pack({}, {})
        self._closed = int(watermark_ns)
        limit = self.windows.closable(watermark_ns)
        return self._pack(self._progress.close(limit), self._links.close(limit))

    def flush(self, end_ns: int) -> Reduced:
        """Close every window up to ``end_ns``, the last one cut short there; the reducer
        takes nothing more."""
        self._check_open()
        self._ended = True
        end = int(end_ns)
        limit = -(-end // self.windows.window_ns)          # the window holding end_ns, + 1
        return self._pack(self._progress.close(limit, end), self._links.close(limit, end))

    def _check_open(self) -> None:
        if self._ended:
            raise RuntimeError("this EdgeReducer was flushed; start a new one")

    def _pack(self, progress: dict[str, np.ndarray], links: dict[str, np.ndarray]) -> Reduced:
        empty = np.empty(0, np.int64)
        progress = progress or {k: empty for k in PROGRESS_FIELDS}
        links = links or {k: empty for k in LINKSTAT_FIELDS}
        self.stats.progress_out += len(progress["rank"])
        self.stats.linkstat_out += len(links["src"])
        self.stats.late_progress = self._progress.late
        self.stats.late_transfers = self._links.late
        names = list(self.strings.names)
        return Reduced(Columns(progress, names), Columns(links, names))
