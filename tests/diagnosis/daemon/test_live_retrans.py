"""The live view carries the retransmissions of sampled sockets (links.ConnResolver) into the
engine, which names the lossy end: three ranks on three hosts, no topology (ranks are the
components), rank 2's cable losing segments both ways."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import CONN_COLUMNS, Columns
from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.live import LiveView
from diagnosis.store import ConnRows, RankRecord, Write, open_store

S = 1_000_000_000
T0 = 1_000 * S
ENDS = {0: "10.0.0.1", 1: "10.0.0.2", 2: "10.0.0.3"}


def _samples(rank: int, t: int, lossy: int) -> Columns:
    """Rank ``rank``'s sockets to both other ranks, cumulative counters at second ``t``; those
    to or from rank ``lossy`` retransmit 40 segments a second."""
    peers = [p for p in ENDS if p != rank]
    table: dict[str, int] = {}
    cols: dict[str, list[int]] = {name: [] for name in CONN_COLUMNS}
    for p in peers:
        cols["rank"].append(rank)
        cols["local"].append(table.setdefault(f"{ENDS[rank]}:{5000 + p}", len(table)))
        cols["remote"].append(table.setdefault(f"{ENDS[p]}:{5000 + rank}", len(table)))
        cols["t_ns"].append(T0 + t * S)
        cols["bytes_acked"].append(t * (8 << 20))
        cols["busy_us"].append(t * 200_000)
        cols["retrans"].append(t * 40 if lossy in (rank, p) else 0)
        for k in ("bytes_received", "rtt_us", "delivery_rate"):
            cols[k].append(0)
    return Columns({k: np.asarray(v, dtype=CONN_COLUMNS[k]) for k, v in cols.items()},
                   list(table))


def test_retransmissions_reach_the_engine_and_name_the_lossy_rank():
    hub = FaultHub(open_store("memory://"))
    q = hub.subscribe()
    live = LiveView(hub)
    live.apply([Write(f"s{r}", 0, RankRecord("job", 0, r, 3, f"h{r}")) for r in ENDS])
    seq = 1
    for t in range(30):
        live.apply([Write(f"s{r}", seq + r, ConnRows("job", 0, _samples(r, t, lossy=2)))
                    for r in ENDS])
        seq += len(ENDS)
        live.drain()
        live.analyze(T0 + t * S)
    engine = live._jobs[("job", 0)].engine
    assert engine.lossy._window().retrans.sum() > 0
    reports = []
    while not q.empty():
        reports.append(q.get_nowait())
    lossy = [r for r in reports if r.kind == "comm_slow" and r.state == "open"]
    assert lossy, [r.summary for r in reports]
    last = lossy[-1]
    assert last.suspects[0].type == "rank" and last.suspects[0].rank == 2
    assert "retransmit" in last.summary
    assert sorted(last.evidence["lossy"]) == ["0>2", "1>2", "2>0", "2>1"]
