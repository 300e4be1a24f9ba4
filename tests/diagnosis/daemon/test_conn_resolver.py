"""Socket counter samples from two nodes become transfer records between ranks."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import CONN_COLUMNS, Columns
from diagnosis.daemon.links import ConnResolver


def _samples(rows: list[tuple[int, str, str, int, int, int]]) -> Columns:
    """rows of (rank, local, remote, t_ns, bytes_acked, busy_us)."""
    table: dict[str, int] = {}
    cols = {name: [] for name in CONN_COLUMNS}
    for rank, local, remote, t, acked, busy in rows:
        cols["rank"].append(rank)
        cols["local"].append(table.setdefault(local, len(table)))
        cols["remote"].append(table.setdefault(remote, len(table)))
        cols["t_ns"].append(t)
        cols["bytes_acked"].append(acked)
        cols["busy_us"].append(busy)
        for k in ("bytes_received", "rtt_us", "delivery_rate", "retrans"):
            cols[k].append(0)
    return Columns({k: np.asarray(v, dtype=CONN_COLUMNS[k]) for k, v in cols.items()},
                   list(table))


S = 1_000_000_000


def test_pairs_ends_and_measures_busy_time():
    res = ConnResolver()
    # rank 0 on node A talks to rank 1 on node B; each node reports its own end
    assert not len(res.add(_samples([(0, "a:1", "b:2", 0, 0, 0)])))
    assert not len(res.add(_samples([(1, "b:2", "a:1", 0, 0, 0)])))
    out = res.add(_samples([(0, "a:1", "b:2", S, 5_000_000, 200_000)]))
    assert out["src"].tolist() == [0] and out["dst"].tolist() == [1]
    assert out["bytes"].tolist() == [5_000_000]
    # 200 ms busy within a 1 s interval: the transfer took 200 ms, not a second
    assert (out["t_end_ns"] - out["t_start_ns"]).tolist() == [200_000_000]


def test_without_busy_time_the_interval_is_the_duration():
    res = ConnResolver()
    res.add(_samples([(0, "a:1", "b:2", 0, 0, 0), (1, "b:2", "a:1", 0, 0, 0)]))
    out = res.add(_samples([(0, "a:1", "b:2", S, 1000, 0)]))
    assert (out["t_end_ns"] - out["t_start_ns"]).tolist() == [S]
    # once a socket has shown busy time, a burst too short to count is not a whole second
    out = res.add(_samples([(0, "a:1", "b:2", 2 * S, 2000, 4)]))
    out = res.add(_samples([(0, "a:1", "b:2", 3 * S, 3000, 4)]))
    assert (out["t_end_ns"] - out["t_start_ns"]).tolist() == [1_000_000]


def test_idle_sockets_and_unknown_peers_give_no_records():
    res = ConnResolver()
    res.add(_samples([(0, "a:1", "c:9", 0, 100, 0)]))
    assert not len(res.add(_samples([(0, "a:1", "c:9", S, 500, 10)])))  # peer never reported
    res.add(_samples([(1, "b:2", "a:3", 0, 100, 0), (0, "a:3", "b:2", 0, 0, 0)]))
    assert not len(res.add(_samples([(1, "b:2", "a:3", S, 100, 0)])))  # nothing moved
