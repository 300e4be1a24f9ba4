"""Turn sampled socket counters into per-connection transfer records.

A sidecar only sees its own end of a connection: (rank, local endpoint, remote endpoint) and
cumulative counters. The peer rank is the rank whose socket has the remote endpoint as its local
one, which becomes known once the other node's samples arrive. Between two samples of a socket,
the bytes it delivered form one transfer record ``src -> dst`` over that interval.
"""

from __future__ import annotations

import numpy as np

from proto.codec import Columns

TRANSFER_COLUMNS = ("src", "dst", "bytes", "t_start_ns", "t_end_ns", "rtt_us", "retrans")


class ConnResolver:
    def __init__(self) -> None:
        self._owner: dict[str, int] = {}  # endpoint "ip:port" -> rank owning that local end
        self._last: dict[tuple[int, str, str], tuple[int, int, int]] = {}  # -> (t, acked, retrans)

    def add(self, cols: Columns) -> Columns | None:
        """Record one batch of samples; return the transfers it completes (may be empty)."""
        n = len(cols)
        if n == 0:
            return None
        names = cols.strings
        rank = cols["rank"].tolist()
        local = [names[i] for i in cols["local"].tolist()]
        remote = [names[i] for i in cols["remote"].tolist()]
        t = cols["t_ns"].tolist()
        acked = cols["bytes_acked"].tolist()
        rtt = cols["rtt_us"].tolist()
        retrans = cols["retrans"].tolist()
        for r, loc in zip(rank, local):
            self._owner[loc] = r
        out: dict[str, list[int]] = {c: [] for c in TRANSFER_COLUMNS}
        # Samples are per socket per second: a loop over sockets, not over collective records.
        for i in range(n):
            key = (rank[i], local[i], remote[i])
            prev = self._last.get(key)
            self._last[key] = (t[i], acked[i], retrans[i])
            peer = self._owner.get(remote[i])
            if prev is None or peer is None or t[i] <= prev[0]:
                continue
            delta = acked[i] - prev[1]
            if delta <= 0:
                continue
            out["src"].append(rank[i])
            out["dst"].append(peer)
            out["bytes"].append(delta)
            out["t_start_ns"].append(prev[0])
            out["t_end_ns"].append(t[i])
            out["rtt_us"].append(rtt[i])
            out["retrans"].append(retrans[i] - prev[2])
        return Columns({c: np.asarray(v, dtype=np.int64) for c, v in out.items()})
