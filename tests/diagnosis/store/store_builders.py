"""Telemetry batches with known content for the store tests."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import CONN_COLUMNS, OP_COLUMNS, Columns
from diagnosis.store import RankRecord, Write

T0 = 1_700_000_000_000_000_000
OPS = ["all_reduce", "broadcast", "send", "recv"]
PGS = ["0", "dp.1", "tp.0"]


def make_ops(n: int, *, rank0: int = 0, seq0: int = 0, done: bool = True, seed: int = 0,
             ranks: int = 8, t0: int = T0) -> Columns:
    """``n`` calls with distinct keys, each column from a seeded generator, strings shuffled so
    that the batch's string table order is not the stores' order."""
    rng = np.random.default_rng(seed)
    strings = ["float32", *OPS, *PGS, "bfloat16"]
    rng.shuffle(strings)
    pos = {s: i for i, s in enumerate(strings)}
    i = np.arange(n)
    c = {
        "rank": (rank0 + i % ranks).astype(np.int32),
        "pg": np.array([pos[p] for p in PGS], dtype=np.uint32)[i % len(PGS)],
        "seq": (seq0 + i // ranks).astype(np.int64),
        "op": np.array([pos[o] for o in OPS], dtype=np.uint32)[rng.integers(0, 4, n)],
        "nbytes": rng.integers(1, 1 << 30, n).astype(np.int64),
        "dtype": np.full(n, pos["float32"], dtype=np.uint32),
        "t_enter_ns": t0 + rng.permutation(n).astype(np.int64) * 1000,
        "t_start_ns": np.full(n, -1, dtype=np.int64),
        "status": np.zeros(n, dtype=np.uint8),
        "peer": np.where(i % 5 == 0, (i + 1) % ranks, -1).astype(np.int32),
    }
    c["t_end_ns"] = c["t_enter_ns"] + 500 if done else np.full(n, -1, dtype=np.int64)
    return Columns({k: c[k] for k in OP_COLUMNS}, strings)


def make_conns(n: int, seed: int = 0) -> Columns:
    rng = np.random.default_rng(seed)
    strings = ["10.0.0.1:5000", "10.0.0.2:6000", "10.0.0.3:7000"]
    c = {name: rng.integers(0, 1 << 40, n).astype(dt) for name, dt in CONN_COLUMNS.items()}
    c["rank"] = rng.integers(0, 4, n).astype(np.int32)
    c["local"] = rng.integers(0, 3, n).astype(np.uint32)
    c["remote"] = ((c["local"] + 1) % 3).astype(np.uint32)
    c["t_ns"] = T0 + rng.permutation(n).astype(np.int64)
    return Columns(c, strings)


def as_records(cols: Columns, columns: dict) -> list[tuple]:
    """Rows with strings resolved, sorted: compares batches whatever their string tables."""
    names = {k: cols.names(k) if k in ("pg", "op", "dtype", "local", "remote") else cols[k]
             for k in columns}
    rows = list(zip(*(names[k].tolist() for k in columns), strict=True))
    return sorted(rows)


def head(cols: Columns, n: int) -> Columns:
    return Columns({k: v[:n] for k, v in cols.columns.items()}, cols.strings)


def ranks_of(job: str, attempt: int, n: int, hosts: int = 2) -> list[RankRecord]:
    return [RankRecord(job, attempt, r, n, f"node{r % hosts}", local_rank=r // hosts, pid=100 + r,
                       gpu=f"node{r % hosts}/gpu{r // hosts}", nic="mlx5_0", backend="gloo",
                       t_ns=T0 - 10_000 + r) for r in range(n)]


def writes_of(sidecar: str, seq0: int, bodies: list) -> list[Write]:
    return [Write(sidecar, seq0 + k, b) for k, b in enumerate(bodies)]
