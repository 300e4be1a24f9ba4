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
from c4.reduce.links import SocketSamples

TRANSFER_COLUMNS = ("src", "dst", "bytes", "t_start_ns", "t_end_ns", "rtt_us", "retrans")


class ConnResolver(SocketSamples):
    def add(self, cols: Columns) -> Columns | None:
        """Record one batch of samples; return the transfers it completes (may be empty)."""
        if len(cols) == 0:
            return None
        rtt = cols["rtt_us"].tolist()
        out: dict[str, list[int]] = {c: [] for c in TRANSFER_COLUMNS}
        for step in self.steps(cols):
            peer = self.owner.get(step.socket[2])
            if peer is None or step.acked <= 0:
                continue
            out["src"].append(step.socket[0])
            out["dst"].append(peer)
            out["bytes"].append(step.acked)
            out["t_start_ns"].append(step.t_ns - self.active_ns(step))
            out["t_end_ns"].append(step.t_ns)
            out["rtt_us"].append(rtt[step.i])
            out["retrans"].append(step.retrans)
        return Columns({c: np.asarray(v, dtype=np.int64) for c, v in out.items()})
