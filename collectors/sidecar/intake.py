"""What the sidecar takes from a local connection, and on what terms.

- **Ownership** (``owners.py``): a frame naming a job that another local user's ranks own is
  refused and counted.
- **Bounds**: a connection registers at most ``max_ranks_per_peer`` ranks (a collector: one)
  and reports statistics only for the ranks it registered; the table of collectors' statistics
  forwarded to the daemon holds at most ``max_collectors`` entries. A forger can no longer make
  the sidecar's own statistics grow past what the daemon takes.
- **Identity**: an ops frame that carries its collector's id and number is taken at most once:
  one at or below the highest number already logged for that (uid, collector) is a resend
  after a reconnection, acknowledged without being taken again.
- **Order of work** for an ops frame: decode (a malformed one is refused), log (``spill.py``:
  only then is it taken), batch.

``take`` parses the frame (raising ``FrameError`` for one that is not a collector frame: the
listener then closes that connection), after checking the size of its body on the wire: a
rank or statistics body over ``max_meta_bytes`` (a collector's are ~100 bytes) is refused
before parsing could cost memory. It returns a ``Receipt`` for ops frames that name their
collector: the listener tells the collector that the frame is taken (in the log, which the
sidecar's death does not lose) or refused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import grpc

from c4.proto import c4_pb2
from c4.proto.codec import BatchError, decode_ops
from c4.ratelog import RateLimitedLog
from collectors.sidecar.batcher import Batcher
from collectors.sidecar.counters import Drops
from collectors.sidecar.errors import LogError
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.owners import Owners
from collectors.sidecar.spill import Spill
from collectors.wire import parse_request, peek_body

log = logging.getLogger(__name__)

_DENIED = grpc.StatusCode.PERMISSION_DENIED.value[0]
_INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]
RankKey = tuple[str, int, int]  # (job, attempt, rank)


@dataclass(eq=False)
class Peer:
    """One local connection: who is at the other end (SO_PEERCRED) and what it registered."""

    uid: int
    pid: int
    gid: int
    ranks: set[RankKey] = field(default_factory=set)


@dataclass
class Receipt:
    """The fate of one ops frame, for its collector."""

    cid: str
    fno: int
    code: int = 0
    error: str = ""


class Watermarks:
    """The highest frame number taken per (uid, collector id): bounded, least recently used
    forgotten first (a forgotten collector's resends would be taken again)."""

    def __init__(self, seed: dict[tuple[int, str], int], max_entries: int = 65536) -> None:
        self._max = max_entries
        self._marks: OrderedDict[tuple[int, str], int] = OrderedDict(seed)

    def seen(self, key: tuple[int, str], fno: int) -> bool:
        mark = self._marks.get(key)
        return mark is not None and fno <= mark

    def advance(self, key: tuple[int, str], fno: int) -> None:
        if fno > self._marks.get(key, 0):
            self._marks[key] = fno
        self._marks.move_to_end(key)
        while len(self._marks) > self._max:
            self._marks.popitem(last=False)


class CollectorTable:
    """The latest statistics of each collector, bounded: when full, an entry silent for
    ``stale_s`` makes room, else the newcomer is refused."""

    def __init__(self, max_entries: int, stale_s: float = 60.0) -> None:
        self._max = max_entries
        self._stale = stale_s
        self._lock = threading.Lock()
        self._entries: OrderedDict[RankKey, tuple[float, c4_pb2.CollectorStats]] = OrderedDict()

    def update(self, stats: c4_pb2.CollectorStats) -> bool:
        key = (stats.job, stats.attempt, stats.rank)
        now = time.monotonic()
        with self._lock:
            if key not in self._entries and len(self._entries) >= self._max:
                oldest, (seen, _) = next(iter(self._entries.items()))
                if now - seen < self._stale:
                    return False
                del self._entries[oldest]
            self._entries[key] = (now, stats)
            self._entries.move_to_end(key)
            return True

    def values(self) -> list[c4_pb2.CollectorStats]:
        with self._lock:
            return [s for _, s in self._entries.values()]

    def __len__(self) -> int:
        return len(self._entries)


class Intake:
    def __init__(self, *, spill: Spill, outbox: Outbox, batcher: Batcher, owners: Owners,
                 drops: Drops, max_collectors: int = 4096, max_ranks_per_peer: int = 64,
                 max_meta_bytes: int = 64 << 10) -> None:
        self._spill = spill
        self._outbox = outbox
        self._batcher = batcher
        self._owners = owners
        self._drops = drops
        self._max_ranks = max_ranks_per_peer
        self._max_meta = max_meta_bytes
        self.collectors = CollectorTable(max_collectors)
        self.watermarks = Watermarks(spill.recovery.watermarks)
        self._lock = threading.Lock()
        self._rated = RateLimitedLog(log)
        self.received = 0           # op records arrived (then taken, or dropped and counted)
        self.duplicate_frames = 0   # resent frames recognized and not taken again
        # (job, attempt) -> {rank: pid}, for the link counters of the ranks' sockets
        self._pids: OrderedDict[tuple[str, int], dict[int, int]] = OrderedDict()

    def pids(self) -> dict[tuple[str, int], dict[int, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._pids.items()}

    # -- one frame -----------------------------------------------------------------------------
    def take(self, peer: Peer, raw: bytes) -> Receipt | None:
        """Take one frame from ``peer``; raises ``FrameError`` if it is not a collector frame."""
        kind, size = peek_body(raw)
        if kind in ("rank", "stats") and size > self._max_meta:
            self._drops.add("bounds", frames=1)
            self._rated.warning("meta", "refusing a %d-byte %s frame from uid %d pid %d: a "
                                "collector's are ~100 bytes (limit %d)", size, kind, peer.uid,
                                peer.pid, self._max_meta)
            return None
        req = parse_request(raw)
        kind = req.WhichOneof("body")
        if kind == "ops":
            return self._ops(peer, raw, req)
        if kind == "rank":
            self._rank(peer, req.rank)
        elif kind == "group":
            if self._owned(peer, req.group.job, 0):
                self._outbox.put(group=req.group)
        elif kind == "stats":
            self._stats(peer, req.stats)
        else:
            self._drops.add("malformed", frames=1)
            self._rated.warning("kind", "refusing a frame with body %r from uid %d pid %d: "
                                "collectors send rank, group, ops or stats", kind, peer.uid,
                                peer.pid)
        return None

    def _owned(self, peer: Peer, job: str, records: int) -> bool:
        if self._owners.allows(job, peer.uid):
            return True
        self._drops.add("not_owner", records=records, frames=1)
        self._rated.warning("owner", "refusing frames of job %r from uid %d (pid %d): the job "
                            "belongs to uid %s on this node; a job's ranks must all run as one "
                            "user", job, peer.uid, peer.pid, self._owners.owner(job))
        return False

    def _rank(self, peer: Peer, rank: c4_pb2.RankInfo) -> None:
        if not self._owned(peer, rank.job, 0):
            return
        key = (rank.job, rank.attempt, rank.rank)
        if key not in peer.ranks and len(peer.ranks) >= self._max_ranks:
            self._drops.add("bounds", frames=1)
            self._rated.warning("ranks", "uid %d pid %d registers more than %d ranks on one "
                                "connection: refused", peer.uid, peer.pid, self._max_ranks)
            return
        peer.ranks.add(key)
        if peer.pid > 0 and rank.pid != peer.pid:
            # the pid the node can vouch for, and the one the link sampler must read /proc of
            # (a rank in another pid namespace knows itself by another number)
            rank.pid = peer.pid
        with self._lock:
            self._pids.setdefault((rank.job, rank.attempt), {})[rank.rank] = rank.pid
            self._pids.move_to_end((rank.job, rank.attempt))
            while len(self._pids) > 1024:
                self._pids.popitem(last=False)
        self._outbox.put(rank=rank)

    def _stats(self, peer: Peer, stats: c4_pb2.SidecarStats) -> None:
        entries = stats.collectors
        # checked before looking at a single entry: a forged frame may hold millions
        refused = len(entries) > len(peer.ranks)
        if not refused:
            for c in entries:
                if (c.job, c.attempt, c.rank) not in peer.ranks:
                    refused = True
                elif not self.collectors.update(c):
                    self._drops.add("bounds", frames=1)
                    self._rated.warning("collectors", "the table of collectors is full (%d): "
                                        "statistics of %s rank %d not forwarded",
                                        len(self.collectors), c.job, c.rank)
        if refused:
            self._drops.add("bounds", frames=1)
            self._rated.warning("stats", "refusing statistics from uid %d pid %d for %d ranks: a "
                                "connection reports only the ranks it registered (%d)", peer.uid,
                                peer.pid, len(entries), len(peer.ranks))

    def _ops(self, peer: Peer, raw: bytes, req: c4_pb2.IngestRequest) -> Receipt | None:
        ops = req.ops
        cid, fno = req.sidecar, req.seq
        receipt = Receipt(cid, fno) if cid and fno else None
        records = len(ops.rank) // 4  # what the frame holds, whatever it claims
        if not self._owned(peer, ops.job, records):
            if receipt is not None:
                receipt.code = _DENIED
                receipt.error = (f"job {ops.job!r} belongs to another user on this node: its "
                                 "records are refused")
            return receipt
        mark = (peer.uid, cid)
        if receipt is not None and self.watermarks.seen(mark, fno):
            with self._lock:
                self.duplicate_frames += 1
            return receipt  # taken before this sidecar (or connection) restarted
        try:
            cols = decode_ops(ops)
        except BatchError as exc:
            self._drops.add("malformed", frames=1)
            self._rated.warning("malformed", "dropping a malformed batch from uid %d pid %d: %s",
                                peer.uid, peer.pid, exc)
            if receipt is not None:
                receipt.code, receipt.error = _INVALID, str(exc)
            return receipt
        if receipt is not None:
            self.watermarks.advance(mark, fno)
        if not len(cols):
            return receipt
        with self._lock:
            self.received += len(cols)
        try:
            # while the daemon is away the frame waits on disk: compressed, 5x more fit
            frame = self._spill.append_frame(peer.uid, peer.pid, cid, fno, raw, len(cols),
                                             (ops.job, ops.attempt),
                                             compress=not self._outbox.connected)
        except LogError as exc:
            self._drops.add("disk_full", records=len(cols))
            self._rated.warning("disk_full", "dropping records (counted): %s", exc)
            return receipt  # settled: counted, not to be sent again
        self._batcher.add(cols, frame, len(raw))
        return receipt
