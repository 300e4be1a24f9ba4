"""The record kinds of trace format version 2 (shared specs section 2, "Version 2"): ``progress``,
``linkstat`` and ``port`` lines, as columnar batches built like op and conn batches (one list of
values per field, checked and converted in C), and their field-by-field checks for the slow path.

Absent counts are 0; absent times, ids and counters -1, as the record classes document.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from diagnosis.engine.records import (
    PORT_COUNTERS,
    LinkStatRecords,
    PortRecords,
    ProgressRecords,
)
from diagnosis.trace.columns import (
    int_column,
    intern,
    nonneg_column,
    opt_int_column,
    opt_intern,
    opt_nonneg_column,
    path_column,
    required,
)
from diagnosis.trace.fields import Fields

#: linkstat counts: absent means none happened in the window
LINK_COUNTS = ("transfers", "bytes", "busy_ns", "max_ns", "open")
PORT_STATES = {"up": 1, "down": 0}


def progress_batch(recs: list[dict[str, Any]]) -> ProgressRecords:
    table: dict[str, int] = {}
    pg = intern(required(recs, "pg"), table)
    op = opt_intern([o.get("op") for o in recs], table)
    return ProgressRecords(
        nonneg_column(required(recs, "rank")), pg, op,
        opt_nonneg_column([o.get("peer") for o in recs], -1),
        int_column(required(recs, "t_ns")),
        opt_nonneg_column([o.get("entered") for o in recs], -1),
        opt_nonneg_column([o.get("completed") for o in recs], -1), list(table))


def check_progress(f: Fields) -> None:
    f.integer("rank", 0)
    f.string("pg", "a communicator name")
    f.integer("t_ns")
    f.opt_integer("entered", 0)
    f.opt_integer("completed", 0)
    f.opt_string("op", "an operation name")
    f.opt_integer("peer", 0)


def linkstat_batch(recs: list[dict[str, Any]]) -> LinkStatRecords:
    table: dict[str, int] = {}
    counts = {name: opt_nonneg_column([o.get(name) for o in recs], 0) for name in LINK_COUNTS}
    return LinkStatRecords(
        nonneg_column(required(recs, "src")), nonneg_column(required(recs, "dst")),
        int_column(required(recs, "t_ns")), nonneg_column(required(recs, "window_ns")),
        opt_intern([o.get("pg") for o in recs], table), counts["transfers"], counts["bytes"],
        counts["busy_ns"], counts["max_ns"], counts["open"],
        opt_int_column([o.get("open_since_ns") for o in recs]),
        opt_nonneg_column([o.get("retrans") for o in recs], -1), list(table),
        path_column([o.get("path") for o in recs]))


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


def port_batch(recs: list[dict[str, Any]]) -> PortRecords:
    table: dict[str, int] = {}
    host = intern(required(recs, "host"), table)
    nic = intern(required(recs, "nic"), table)
    # KeyError (or TypeError for a list) on any other state sends the batch to the slow path
    up = np.array([PORT_STATES[o["state"]] for o in recs], dtype=np.int8)
    counters = {}
    for name in PORT_COUNTERS:
        values = [o.get(name) for o in recs]
        if values.count(None) < len(values):
            counters[name] = opt_nonneg_column(values, -1)
    return PortRecords(host, nic, int_column(required(recs, "t_ns")), up, list(table),
                       counters)


def check_port(f: Fields) -> None:
    f.string("host", "a host id")
    f.string("nic", "a NIC id")
    f.integer("t_ns")
    f.choice("state", tuple(PORT_STATES))
    for name in PORT_COUNTERS:
        f.opt_integer(name, 0)

