"""Decoded reduced batches (``c4.proto.codec`` columns) as the engine's record classes."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import PORT_COUNTER_COLUMNS, Columns
from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords


def progress_records(cols: Columns) -> ProgressRecords:
    c = cols.columns
    return ProgressRecords(c["rank"], c["pg"], c["op"], c["peer"], c["t_ns"], c["entered"],
                           c["completed"], list(cols.strings))


def linkstat_records(cols: Columns, dst: np.ndarray) -> LinkStatRecords:
    """LinkStatBatch columns whose peers are ``dst`` (named by ``linkstats``). Their string
    table holds endpoints too: the records get one of just the communicators they name (the
    engine takes every string of a table as a communicator)."""
    c = cols.columns
    pg = c["pg"].astype(np.int64)
    named = pg >= 0
    used, inverse = np.unique(pg[named], return_inverse=True)
    compact = np.full(len(pg), -1, np.int64)
    compact[named] = inverse
    return LinkStatRecords(c["src"], dst, c["t_ns"], c["window_ns"], compact, c["transfers"],
                           c["bytes"], c["busy_ns"], c["max_ns"], c["open"],
                           c["open_since_ns"], c["retrans"],
                           [cols.strings[i] for i in used.tolist()])


def port_records(cols: Columns) -> PortRecords:
    c = cols.columns
    return PortRecords(c["host"], c["nic"], c["t_ns"], c["up"], list(cols.strings),
                       {k: c[k] for k in PORT_COUNTER_COLUMNS})
