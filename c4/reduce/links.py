"""Socket counter samples -> transfer rows for the edge reducer's ``linkstat`` windows.

The sidecar samples the cumulative TCP_INFO counters of its ranks' sockets (``LinkSampler``).
Between two samples of a socket, the bytes it delivered are one transfer (a burst of activity)
ending at the later sample, timed as the daemon times them from raw samples
(``diagnosis.daemon.links``): by the socket's busy time when the kernel counts it, else the
interval. A socket that retransmits while nothing is acknowledged has data stuck in flight: an
open transfer from the sample before, completed (same start, so it replaces the open row in the
reducer) once acknowledgements move again.

A sidecar sees one end of each socket. The peer rank is known here only when the other end
belongs to a local rank too (its local endpoint is this socket's remote one); otherwise the
row carries the endpoints and the daemon, which hears every node, names the peer. Transfer rows
use a per-socket id as their ``dst`` so that the reducer keeps sockets apart; :meth:`label`
turns ids back into (peer rank or -1, local endpoint, remote endpoint).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from c4.proto.codec import LINKSTAT_COLUMNS, Columns
from c4.reduce import EdgeReducer

MS = 1_000_000
TRANSFER_COLUMNS = ("src", "dst", "bytes", "t_start_ns", "t_end_ns", "retrans")


Socket = tuple[int, str, str]            # (rank, local endpoint, remote endpoint)


@dataclass(frozen=True)
class Step:
    """What one socket did between two samples: row ``i`` of the batch, ending at ``t_ns``."""

    i: int
    socket: Socket
    prev_t_ns: int
    t_ns: int
    acked: int          # bytes acknowledged in between
    retrans: int        # retransmissions in between
    busy_us: int        # the kernel's busy time in between (0 where it keeps none)


class SocketSamples:
    """Per job: the cumulative TCP_INFO samples of sockets (``c4.proto.codec.CONN_COLUMNS``)
    as steps between each socket's consecutive samples, and which rank owns each endpoint."""

    def __init__(self) -> None:
        self.owner: dict[str, int] = {}                     # local endpoint -> rank
        # socket -> (t, bytes_acked, retrans, busy_us) of its last sample
        self._last: dict[Socket, tuple[int, int, int, int]] = {}
        self._busy_known: set[Socket] = set()

    def steps(self, cols: Columns) -> Iterator[Step]:
        """The step each sample of ``cols`` ends (none for a socket's first sample, or one
        not later than its last)."""
        n = len(cols)
        if not n:
            return
        names = cols.strings
        rank = cols["rank"].tolist()
        local = [names[i] for i in cols["local"].tolist()]
        remote = [names[i] for i in cols["remote"].tolist()]
        t = cols["t_ns"].tolist()
        acked = cols["bytes_acked"].tolist()
        retrans = cols["retrans"].tolist()
        busy = cols["busy_us"].tolist()
        for r, loc in zip(rank, local, strict=True):
            self.owner[loc] = r
        # a loop over sockets (a few per rank, sampled once a second), not over calls
        for i in range(n):
            key = (rank[i], local[i], remote[i])
            prev = self._last.get(key)
            self._last[key] = (t[i], acked[i], retrans[i], busy[i])
            if prev is not None and t[i] > prev[0]:
                yield Step(i, key, prev[0], t[i], acked[i] - prev[1], retrans[i] - prev[2],
                           busy[i] - prev[3])

    def active_ns(self, step: Step) -> int:
        """How long the socket was sending during ``step``: its busy time. The kernel counts
        busy time in jiffies, so a short burst may add nothing: once a socket has shown busy
        time, a burst too short to count is taken as 1 ms; a kernel without busy time: the
        whole interval."""
        interval = step.t_ns - step.prev_t_ns
        if step.busy_us > 0:
            self._busy_known.add(step.socket)
            return min(step.busy_us * 1000, interval)
        return min(MS, interval) if step.socket in self._busy_known else interval


class SocketTransfers(SocketSamples):
    """Per job: turns batches of socket samples (``c4.proto.codec.CONN_COLUMNS``) into transfer
    rows (``src`` rank, ``dst`` socket id, ``bytes``, ``t_start_ns``, ``t_end_ns`` -1 while
    stuck, ``retrans``)."""

    def __init__(self) -> None:
        super().__init__()
        self._ids: dict[Socket, int] = {}
        self.sockets: list[Socket] = []                     # id -> (rank, local, remote)
        self.stuck: dict[int, int] = {}                     # id -> start of its open transfer

    def add(self, cols: Columns) -> Columns:
        out: dict[str, list[int]] = {c: [] for c in TRANSFER_COLUMNS}
        for step in self.steps(cols):
            sid = self._ids.get(step.socket)
            if sid is None:
                sid = self._ids[step.socket] = len(self.sockets)
                self.sockets.append(step.socket)
            src, retx = step.socket[0], max(step.retrans, 0)
            if step.acked > 0:
                start = self.stuck.pop(sid, None)
                if start is None:
                    start = step.t_ns - self.active_ns(step)
                self._row(out, src, sid, step.acked, start, step.t_ns, retx)
            elif retx > 0 and sid not in self.stuck:
                self.stuck[sid] = step.prev_t_ns
                self._row(out, src, sid, 0, step.prev_t_ns, -1, -1)
        return Columns({c: np.asarray(v, dtype=np.int64) for c, v in out.items()})

    def open_rows(self) -> Columns:
        """The transfers stuck now, as open rows (to seed a fresh reducer)."""
        out: dict[str, list[int]] = {c: [] for c in TRANSFER_COLUMNS}
        for sid, start in self.stuck.items():
            self._row(out, self.sockets[sid][0], sid, 0, start, -1, -1)
        return Columns({c: np.asarray(v, dtype=np.int64) for c, v in out.items()})

    @staticmethod
    def _row(out: dict[str, list[int]], src: int, sid: int, nbytes: int, start: int, end: int,
             retrans: int) -> None:
        for name, v in zip(TRANSFER_COLUMNS, (src, sid, nbytes, start, end, retrans),
                           strict=True):
            out[name].append(v)

    def linkstat(self, ls: Columns) -> Columns:
        """A reducer's linkstat windows of these sockets (``dst`` a socket id) as shipped:
        ``dst`` the peer rank where known, the endpoints in ``local``/``remote``."""
        peer, local, remote = self.label(np.asarray(ls["dst"]))
        strings: dict[str, int] = {}
        loc = [strings.setdefault(s, len(strings)) for s in local]
        rem = [strings.setdefault(s, len(strings)) for s in remote]
        c = {k: np.asarray(ls[k]) for k in ("src", "t_ns", "window_ns", "transfers", "bytes",
                                            "busy_ns", "max_ns", "open", "open_since_ns",
                                            "retrans")}
        c.update(dst=peer, local=np.asarray(loc, dtype=np.int64),
                 remote=np.asarray(rem, dtype=np.int64), pg=np.full(len(peer), -1, np.int64))
        return Columns({k: c[k] for k in LINKSTAT_COLUMNS}, list(strings))

    def label(self, sids: np.ndarray) -> tuple[np.ndarray, list[str], list[str]]:
        """For socket ids: the peer rank where a local rank owns the remote end (else -1), the
        local endpoints and the remote endpoints."""
        keys = [self.sockets[s] for s in sids.tolist()]
        peer = np.asarray([self.owner.get(remote, -1) for _, _, remote in keys], dtype=np.int64)
        return peer, [k[1] for k in keys], [k[2] for k in keys]


def sample_windows(samples: Columns, window_ns: int) -> Columns | None:
    """Raw socket samples of a whole recording (any nodes, ``c4.proto.codec.CONN_COLUMNS``) as the
    linkstat windows an edge in reduced mode would have shipped for them, or None if they show
    no transfer: how an export writes the samples of a job whose telemetry was full."""
    if not len(samples):
        return None
    order = np.lexsort((samples["rank"], samples["t_ns"]))
    sockets = SocketTransfers()
    rows = sockets.add(Columns({k: np.asarray(v)[order] for k, v in samples.columns.items()},
                               samples.strings))
    if not len(rows):
        return None
    reducer = EdgeReducer(1, window_ns)
    reducer.add_transfers(rows)
    ls = reducer.flush(int(samples["t_ns"].max())).linkstat
    return sockets.linkstat(ls) if len(ls) else None
