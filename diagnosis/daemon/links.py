"""Turn sampled socket counters into per-connection transfer records.

A sidecar only sees its own end of a connection: (rank, local endpoint, remote endpoint) and
cumulative counters. The peer rank is the rank whose socket has the remote endpoint as its local
one, which becomes known once the other node's samples arrive. Between two samples of a socket,
the bytes it delivered form one transfer record ``src -> dst``. Its duration is the time the
socket had data in flight (the kernel's busy time) when known, because a sample interval
mostly measures how long the job computed between collectives: every connection of a slowed
job moves the same bytes per interval, but the one on a slow path stays busy for longer.
"""

from __future__ import annotations

import numpy as np

from c4.proto.codec import Columns

TRANSFER_COLUMNS = ("src", "dst", "bytes", "t_start_ns", "t_end_ns", "rtt_us", "retrans")


class ConnResolver:
    def __init__(self) -> None:
        self._owner: dict[str, int] = {}  # endpoint "ip:port" -> rank owning that local end
        # (rank, local, remote) -> (t, acked, retrans, busy_us)
        self._last: dict[tuple[int, str, str], tuple[int, int, int, int]] = {}
        self._busy_known: set[tuple[int, str, str]] = set()

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
        busy = cols["busy_us"].tolist()
        for r, loc in zip(rank, local):
            self._owner[loc] = r
        out: dict[str, list[int]] = {c: [] for c in TRANSFER_COLUMNS}
        # Samples are per socket per second: a loop over sockets, not over collective records.
        for i in range(n):
            key = (rank[i], local[i], remote[i])
            prev = self._last.get(key)
            self._last[key] = (t[i], acked[i], retrans[i], busy[i])
            peer = self._owner.get(remote[i])
            if prev is None or peer is None or t[i] <= prev[0]:
                continue
            delta = acked[i] - prev[1]
            if delta <= 0:
                continue
            out["src"].append(rank[i])
            out["dst"].append(peer)
            out["bytes"].append(delta)
            out["t_start_ns"].append(t[i] - self._active_ns(key, busy[i] - prev[3], t[i] - prev[0]))
            out["t_end_ns"].append(t[i])
            out["rtt_us"].append(rtt[i])
            out["retrans"].append(retrans[i] - prev[2])
        return Columns({c: np.asarray(v, dtype=np.int64) for c, v in out.items()})

    def _active_ns(self, key: tuple[int, str, str], busy_us: int, interval_ns: int) -> int:
        """How long the socket was sending during an interval. The kernel counts busy time in
        jiffies, so a short burst may add nothing: once a socket has shown busy time, a burst
        too short to count is taken as one millisecond, not as the whole interval."""
        if busy_us > 0:
            self._busy_known.add(key)
            return min(busy_us * 1000, interval_ns)
        return min(1_000_000, interval_ns) if key in self._busy_known else interval_ns
