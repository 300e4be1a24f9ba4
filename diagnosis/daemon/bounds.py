"""What a request may hold, checked at the door before anything of it is stored.

Times must lie near the daemon's clock: no older than ``max_age_s`` (a sidecar's log may hold
records through a long outage, so days) and no further ahead than ``max_ahead_s`` (clock skew
between nodes and the daemon). An int64-extreme time once passed, broke the live view's
arithmetic for a whole group commit and, exported, crashed ``c4 analyze``. Other integer columns
(counters, sizes, sequence numbers) must stay within ``±2**62`` so that sums and differences of
two values cannot overflow. Rank ids, communicator sizes and the names one batch carries are
bounded too: each costs the live detectors memory or time.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import numpy as np

from c4.proto.codec import Columns
from c4.settings import (
    DAY_S,
    at_least,
    format_duration,
    parse_duration,
    positive,
    setting,
    validate,
)
from diagnosis.daemon.errors import Rejected
from diagnosis.errors import ConfigError

#: the largest magnitude any integer column may hold (sentinels like -1 are well inside)
MAX_MAGNITUDE = 1 << 62
#: the longest window a linkstat record may cover
MAX_WINDOW_NS = int(DAY_S * 1e9)

# message name -> its time columns, each (column, whether -1 means "not yet")
TIME_COLUMNS: dict[str, tuple[tuple[str, bool], ...]] = {
    "OpBatch": (("t_enter_ns", False), ("t_start_ns", True), ("t_end_ns", True)),
    "ConnSampleBatch": (("t_ns", False),),
    "ProgressBatch": (("t_ns", False),),
    "LinkStatBatch": (("t_ns", False), ("open_since_ns", True)),
    "PortBatch": (("t_ns", False),),
}


def _refuse(message: str) -> Rejected:
    return Rejected(grpc.StatusCode.INVALID_ARGUMENT, message)


@dataclass(frozen=True)
class Bounds:
    """The daemon's ``--max-ranks``, ``--max-names``, ``--max-record-age``,
    ``--max-clock-ahead``."""

    #: ranks per job: world size, and every rank id below it
    max_ranks: int = setting(262_144, flag="--max-ranks", env="C4_MAX_RANKS",
                             check=lambda v: None if 1 <= v <= 1 << 30 else
                             "must be between 1 and 2**30 (the rank ids c4 keeps)",
                             help="Ranks per job (world size, rank ids, communicator sizes); "
                                  "more are refused.")
    #: distinct names (communicators, ops, endpoints, hosts) in one batch's string table
    max_names: int = setting(65_536, flag="--max-names", env="C4_MAX_NAMES",
                             check=at_least(1),
                             help="Names (communicators, ops, endpoints) one batch may carry; "
                                  "a batch with more is refused.")
    #: how old a record may be, and how far ahead of the daemon's clock
    max_age_s: float = setting(30 * DAY_S, flag="--max-record-age", env="C4_MAX_RECORD_AGE",
                               cli_type=str, parse=parse_duration, to_cli=format_duration,
                               check=positive,
                               help="Records older than this (by the daemon's clock) are "
                                    "refused; at most --retention.")
    max_ahead_s: float = setting(3600.0, flag="--max-clock-ahead", env="C4_MAX_CLOCK_AHEAD",
                                 cli_type=str, parse=parse_duration, to_cli=format_duration,
                                 check=positive,
                                 help="Records stamped further ahead of the daemon's clock are "
                                      "refused (node clocks off).")

    def __post_init__(self) -> None:
        validate(self, ConfigError)

    def time_range(self, now_ns: int) -> tuple[int, int]:
        """The times a record may carry when the daemon's clock reads ``now_ns``."""
        return now_ns - int(self.max_age_s * 1e9), now_ns + int(self.max_ahead_s * 1e9)


def _fmt_time(t: int, now_ns: int) -> str:
    delta = (t - now_ns) / 1e9
    if abs(delta) > 1e9:
        return f"{t} ns since the epoch"
    return f"{t} ns ({abs(delta) / 3600:,.1f} h {'ahead of' if delta > 0 else 'behind'} the " \
           "daemon's clock)"


def check_times(cols: Columns, kind: str, bounds: Bounds, now_ns: int) -> None:
    """Every time column of a decoded batch of message ``kind`` within ``bounds``."""
    if not len(cols):
        return
    lo, hi = bounds.time_range(now_ns)
    for name, may_be_unset in TIME_COLUMNS.get(kind, ()):
        t = cols.columns[name]
        bad = (t < lo) | (t > hi)
        if may_be_unset:
            bad &= t != -1
        if bad.any():
            first = int(t[np.flatnonzero(bad)[0]])
            unset = " (-1: not yet)" if may_be_unset else ""
            raise _refuse(
                f"{kind} column {name!r} holds {_fmt_time(first, now_ns)}; the daemon takes "
                f"times from {bounds.max_age_s / 3600:,.0f} h behind its clock to "
                f"{bounds.max_ahead_s / 3600:,.1f} h ahead{unset}: check the node's clock "
                "(NTP), or the daemon's --max-record-age / --max-clock-ahead")
    if kind == "LinkStatBatch" and int(cols.columns["window_ns"].max()) > MAX_WINDOW_NS:
        raise _refuse(f"LinkStatBatch column 'window_ns' holds "
                          f"{int(cols.columns['window_ns'].max())} ns, over one day")


def check_magnitudes(cols: Columns, kind: str) -> None:
    """No signed integer column holds a value beyond ``±MAX_MAGNITUDE``."""
    for name, col in cols.columns.items():
        if not len(col) or col.dtype.kind != "i" or col.dtype.itemsize < 8:
            continue
        if int(col.max()) > MAX_MAGNITUDE or int(col.min()) < -MAX_MAGNITUDE:
            worst = int(col.max()) if int(col.max()) > MAX_MAGNITUDE else int(col.min())
            raise _refuse(f"{kind} column {name!r} holds {worst}, beyond the ±2**62 c4 "
                              "takes in any integer column")


def check_ranks(values: np.ndarray, what: str, bounds: Bounds) -> None:
    """Rank ids below ``bounds.max_ranks`` (-1, "none", passes)."""
    if len(values) and int(values.max()) >= bounds.max_ranks:
        raise _refuse(f"{what} holds rank {int(values.max())}; this daemon takes ranks "
                          f"below {bounds.max_ranks:,} (its --max-ranks)")


def check_names(strings: list[str], kind: str, bounds: Bounds) -> None:
    if len(strings) > bounds.max_names:
        raise _refuse(f"{kind} carries {len(strings):,} names in its string table; this "
                          f"daemon takes at most {bounds.max_names:,} per batch (its "
                          "--max-names): send smaller batches")


def check_batch(cols: Columns, kind: str, bounds: Bounds, now_ns: int,
                rank_columns: tuple[str, ...]) -> None:
    """Every bound a decoded batch must keep."""
    check_names(cols.strings, kind, bounds)
    for name in rank_columns:
        check_ranks(cols.columns[name], f"{kind} column {name!r}", bounds)
    check_magnitudes(cols, kind)
    check_times(cols, kind, bounds, now_ns)


def sane_rows(cols: Columns, kind: str, *, now_ns: int, ahead_s: float = DAY_S) -> np.ndarray:
    """Rows of a stored batch a reader can use: times from 0 to ``ahead_s`` past ``now_ns``
    (-1 where it means "not yet") and every integer within ``±MAX_MAGNITUDE``. For data stored
    before the door checked times; the door's own bounds are narrower."""
    keep = np.ones(len(cols), dtype=bool)
    hi = now_ns + int(ahead_s * 1e9)
    for name, may_be_unset in TIME_COLUMNS.get(kind, ()):
        t = cols.columns[name]
        ok = (t >= 0) & (t <= hi)
        keep &= (ok | (t == -1)) if may_be_unset else ok
    for col in cols.columns.values():
        if col.dtype.kind == "i" and col.dtype.itemsize >= 8:
            keep &= (col <= MAX_MAGNITUDE) & (col >= -MAX_MAGNITUDE)
    return keep
