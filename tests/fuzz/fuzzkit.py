"""Shared settings and strategies of the fuzz suite.

``C4_FUZZ_EXAMPLES`` scales every fuzzer (default: a moderate count so the whole suite runs in
well under a minute; set it to thousands for a long hunt). Settings are attached per test, not
loaded as a global profile, so other test modules keep their own hypothesis settings.
"""

from __future__ import annotations

import os
import time

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from c4.proto import c4_pb2
from c4.proto.codec import OP_COLUMNS, Columns, encode_ops

# good records carry times near the daemon's clock (it refuses others)
T0 = time.time_ns() // 1_000_000_000 * 1_000_000_000

SCALE = float(os.environ.get("C4_FUZZ_SCALE", "1"))


def fuzz(examples: int) -> settings:
    """Settings for one fuzzer: ``examples`` scaled by C4_FUZZ_SCALE, no deadline."""
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


def mutate(data: bytes, draw) -> bytes:
    """A few random byte-level edits of ``data``: flips, deletions, insertions, truncation."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(("flip", "delete", "insert", "truncate", "dup")))
        if not buf:
            buf += draw(st.binary(min_size=1, max_size=8))
            continue
        i = draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "delete":
            del buf[i:i + draw(st.integers(1, 16))]
        elif kind == "insert":
            buf[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "truncate":
            del buf[i:]
        else:
            j = draw(st.integers(i, min(len(buf), i + 64)))
            buf[j:j] = buf[i:j]
    return bytes(buf)


# JSON values of every shape, for parsers that take decoded JSON
json_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(json_scalars,
                           lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=6),
                           max_leaves=25)

_INT_BOUNDS = {np.dtype("<i4"): (-(2**31), 2**31 - 1), np.dtype("<u4"): (0, 2**32 - 1),
               np.dtype("<i8"): (-(2**63), 2**63 - 1), np.dtype("u1"): (0, 255)}


@st.composite
def op_columns(draw, n: int | None = None, nstrings: int | None = None) -> Columns:
    """Op columns of matching length with values anywhere in their dtype (valid shape, any
    content: negative seqs, huge ranks, ends before enters, indexes past the string table)."""
    n = draw(st.integers(0, 40)) if n is None else n
    nstr = draw(st.integers(0, 4)) if nstrings is None else nstrings
    cols = {}
    for name, dtype in OP_COLUMNS.items():
        lo, hi = _INT_BOUNDS[dtype]
        small = st.integers(max(lo, -3), min(hi, 6))
        values = draw(st.lists(small | st.integers(lo, hi), min_size=n, max_size=n))
        cols[name] = np.asarray(values, dtype=dtype)
    strings = draw(st.lists(st.text(max_size=8), min_size=nstr, max_size=nstr))
    errors = draw(st.dictionaries(st.integers(0, 2**32 - 1) | st.integers(0, n + 2),
                                  st.text(max_size=10), max_size=3))
    return Columns(cols, strings, errors)


@st.composite
def ingest_requests(draw, jobs: tuple[str, ...] = ("fuzz",)) -> c4_pb2.IngestRequest:
    """Structurally valid IngestRequests with wrong-but-plausible contents."""
    # mostly well-addressed requests, so that the bodies get past the envelope checks
    req = c4_pb2.IngestRequest(
        sidecar=draw(st.sampled_from(("fuzz-car",) * 6 + ("", "x" * 300))),
        seq=draw(st.integers(1, 2**20) | st.integers(0, 2**64 - 1)))
    job = draw(st.sampled_from(jobs * 6 + ("", "unknown-job")))
    kind = draw(st.sampled_from(("rank", "group", "ops", "ops", "ops_raw", "conns", "stats",
                                 "none")))
    if kind == "rank":
        rank = draw(st.integers(-(2**31), 2**31 - 1) | st.integers(0, 100))
        req.rank.CopyFrom(c4_pb2.RankInfo(
            job=job, rank=rank,
            world_size=draw(st.integers(-(2**31), 2**31 - 1)
                            | st.just(min(rank + 1, 2**31 - 1))),
            host=draw(st.text(max_size=6)), attempt=draw(st.integers(0, 2**32 - 1)),
            t_ns=draw(st.integers(-(2**63), 2**63 - 1))))
    elif kind == "group":
        req.group.CopyFrom(c4_pb2.GroupInfo(
            job=job, pg=draw(st.text(max_size=5)),
            ranks=draw(st.lists(st.integers(-(2**31), 2**31 - 1) | st.integers(-1, 8),
                                max_size=10)),
            attempt=draw(st.integers(0, 3))))
    elif kind == "ops":
        cols = draw(op_columns())
        if draw(st.booleans()) and cols.strings:
            # past decoding: string indexes, status and ranks in range, the rest anything
            nstr = len(cols.strings)
            for name in ("pg", "op", "dtype"):
                cols.columns[name] = cols.columns[name] % nstr
            cols.columns["status"] = cols.columns["status"] % 3
            cols.columns["rank"] = cols.columns["rank"] & 0x7FFFFFFF
            cols.error_text = {r % len(cols): t for r, t in cols.error_text.items()
                               if len(cols)}
        msg = c4_pb2.OpBatch(job=job, attempt=draw(st.integers(0, 3)))
        msg.count = len(cols)
        msg.strings.extend(cols.strings)
        for name, dtype in OP_COLUMNS.items():
            setattr(msg, name, np.ascontiguousarray(cols.columns[name], dtype=dtype).tobytes())
        for row, text in cols.error_text.items():
            msg.error_text[row] = text
        req.ops.CopyFrom(msg)
    elif kind == "ops_raw":
        # count and column lengths that need not agree
        msg = c4_pb2.OpBatch(job=job, count=draw(st.integers(0, 2**32 - 1) | st.integers(0, 9)))
        for name in OP_COLUMNS:
            setattr(msg, name, draw(st.binary(max_size=48)))
        msg.strings.extend(draw(st.lists(st.text(max_size=4), max_size=3)))
        req.ops.CopyFrom(msg)
    elif kind == "conns":
        n = draw(st.integers(0, 6))
        msg = c4_pb2.ConnSampleBatch(job=job, count=draw(st.sampled_from((n, n + 1, 0))))
        msg.strings.extend(draw(st.lists(st.text(max_size=4), max_size=3)))
        from c4.proto.codec import CONN_COLUMNS

        for name, dtype in CONN_COLUMNS.items():
            lo, hi = _INT_BOUNDS[dtype]
            values = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
            setattr(msg, name, np.asarray(values, dtype=dtype).tobytes())
        req.conns.CopyFrom(msg)
    elif kind == "stats":
        req.stats.CopyFrom(c4_pb2.SidecarStats(host=draw(st.text(max_size=5)),
                                               received=draw(st.integers(0, 2**64 - 1))))
    return req


def good_ops(job: str, rank: int, seqs: range) -> c4_pb2.OpBatch:
    n = len(seqs)
    seq = np.asarray(seqs, dtype=np.int64)
    cols = Columns({
        "rank": np.full(n, rank, np.int32), "pg": np.zeros(n, np.uint32), "seq": seq,
        "op": np.full(n, 2, np.uint32), "nbytes": np.full(n, 4096, np.int64),
        "dtype": np.ones(n, np.uint32), "t_enter_ns": T0 + seq * 10**6,
        "t_start_ns": np.full(n, -1, np.int64), "t_end_ns": T0 + seq * 10**6 + 10**5,
        "status": np.zeros(n, np.uint8), "peer": np.full(n, -1, np.int32)},
        ["0", "float32", "all_reduce"])
    return encode_ops(job, cols)


def mutate_json(obj, draw, edits: int | None = None):
    """A deep copy of ``obj`` with a few subtrees replaced by arbitrary JSON, deleted, or
    duplicated: the shape of a real file, with wrong values where a parser looks."""
    import copy

    obj = copy.deepcopy(obj)
    for _ in range(draw(st.integers(1, 4)) if edits is None else edits):
        # walk down to a random container
        node, path = obj, []
        while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
            key = draw(st.sampled_from(sorted(node, key=str) if isinstance(node, dict)
                                       else range(len(node))))
            if not isinstance(node[key], (dict, list)):
                break
            path.append(key)
            node = node[key]
        if not isinstance(node, (dict, list)) or not node:
            continue
        key = draw(st.sampled_from(sorted(node, key=str) if isinstance(node, dict)
                                   else range(len(node))))
        action = draw(st.sampled_from(("replace", "replace", "delete", "dup")))
        if action == "replace":
            node[key] = draw(json_values)
        elif action == "delete":
            del node[key]
        elif isinstance(node, list):
            node.insert(key, copy.deepcopy(node[key]))
        else:
            node[f"{key}_"] = copy.deepcopy(node[key])
    return obj
