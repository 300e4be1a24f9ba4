"""The record kinds of trace format version 2 (shared specs section 2, "Version 2"): ``progress``,
``linkstat`` and ``port`` lines, as columnar batches built like op and conn batches (one list of
values per field, checked and converted in C), and their field-by-field checks for the slow path.

Absent counts are 0; absent times, ids and counters -1, as the record classes document.
"""

from __future__ import annotations

import numpy as np

from diagnosis.engine.records import (
    PORT_COUNTERS,
    LinkStatRecords,
    PortRecords,
    ProgressRecords,
)
from diagnosis.trace.columns import (
    Rows,
    intern,
    opt_intern,
    opt_nonneg_column,
)
from diagnosis.trace.fields import Fields

#: linkstat counts: absent means none happened in the window
LINK_COUNTS = ("transfers", "bytes", "busy_ns", "max_ns", "open")
PORT_STATES = {"up": 1, "down": 0}


def progress_batch(rows: Rows) -> ProgressRecords:
    table: dict[str, int] = {}
    pg = intern(rows.required("pg"), table)
    op = opt_intern(rows.optional("op"), table)
    return ProgressRecords(
        rows.nonneg("rank"), pg, op, rows.opt_nonneg("peer", -1), rows.ints("t_ns"),
        rows.opt_nonneg("entered", -1), rows.opt_nonneg("completed", -1), list(table))


def check_progress(f: Fields) -> None:
    f.integer("rank", 0)
    f.string("pg", "a communicator name")
    f.integer("t_ns")
    f.opt_integer("entered", 0)
    f.opt_integer("completed", 0)
    f.opt_string("op", "an operation name")
    f.opt_integer("peer", 0)


def linkstat_batch(rows: Rows) -> LinkStatRecords:
    table: dict[str, int] = {}
    counts = {name: rows.opt_nonneg(name, 0) for name in LINK_COUNTS}
    return LinkStatRecords(
        rows.nonneg("src"), rows.nonneg("dst"), rows.ints("t_ns"), rows.nonneg("window_ns"),
        opt_intern(rows.optional("pg"), table), counts["transfers"], counts["bytes"],
        counts["busy_ns"], counts["max_ns"], counts["open"], rows.opt_ints("open_since_ns"),
        rows.opt_nonneg("retrans", -1), list(table), rows.paths("path"))


def check_linkstat(f: Fields) -> None:
    f.integer("src", 0)
    f.integer("dst", 0)
    f.integer("t_ns")
    f.integer("window_ns", 0)
    f.opt_string("pg", "a communicator name")
    f.opt_path("path")
    for name in LINK_COUNTS:
        f.opt_integer(name, 0)
    f.opt_integer("open_since_ns")
    f.opt_integer("retrans", 0)


def port_batch(rows: Rows) -> PortRecords:
    table: dict[str, int] = {}
    host = intern(rows.required("host"), table)
    nic = intern(rows.required("nic"), table)
    # KeyError (or TypeError for a list) on any other state sends the batch to the slow path
    up = np.array(list(map(PORT_STATES.__getitem__, rows.required("state"))), dtype=np.int8)
    counters = {}
    for name in PORT_COUNTERS:
        values = rows.optional(name)
        if values.count(None) < len(values):
            counters[name] = opt_nonneg_column(values, -1, rows.typed)
    return PortRecords(host, nic, rows.ints("t_ns"), up, list(table),
                       counters)


def check_port(f: Fields) -> None:
    f.string("host", "a host id")
    f.string("nic", "a NIC id")
    f.integer("t_ns")
    f.choice("state", tuple(PORT_STATES))
    for name in PORT_COUNTERS:
        f.opt_integer(name, 0)

