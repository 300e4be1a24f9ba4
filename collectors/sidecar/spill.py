"""The sidecar's write-ahead log: everything it accepts is written here before it counts as
taken, and kept until the daemon acknowledges it.

Three kinds of record (framed and checksummed by ``wal.Log``):

- FRAME: an op frame exactly as a collector sent it, with the sender's uid and pid (from the
  socket's peer credentials) and the frame's identity (collector id, frame number), so that a
  collector's resend after a crash is recognized;
- REQUEST: a whole ``IngestRequest`` with its (sidecar, seq): ranks, groups, link samples;
- CUT: "request (sidecar, seq) is these FRAME records merged", written when the batcher closes a
  batch. The merged batch itself is never written: each record is on disk once.

Frames are compressed (zlib level 1: ~5x on op frames, ~0.5 us per record) while the daemon is
unreachable, when they will wait on disk and its room is what counts; otherwise they stay
plain, so that delivering costs nothing more than writing.

A record counts as taken once written: the page cache keeps it if the sidecar process dies
(SIGKILL included), and a restarted sidecar sends it again under the same (sidecar, seq), which
the daemon acknowledges as a duplicate without storing it twice. fsync only matters if the node
itself goes down, and then only for records not yet delivered (the collectors, on the same
node, go down too; what the daemon stored is safe there). So a thread fsyncs, in one batch,
every record still undelivered ``sync_interval_s`` after it was written: while the daemon
keeps up nothing waits that long and nothing is fsynced (a segment deleted before the kernel
writes it back never costs a disk write); while it is away, the log is synced every interval.
On a node crash, records written within the last interval and not yet delivered may be lost,
and a batch delivered just before the crash may be sent again under a new number (its frames
written back by the kernel, its cut not yet): a duplicate, never a loss beyond that interval.

Space: a segment is referenced by the frames in it not yet cut and by the unacknowledged
requests that keep a record in it. Segments are deleted oldest first once unreferenced: were a
newer one deleted first, it could take with it the cut of a frame in an older one, and after a
crash that frame would be batched afresh under a new number and stored twice.

``Spill(None, ...)`` keeps nothing on disk (for measuring what the log costs): requests live in
memory only and a crash loses them.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from c4.proto import c4_pb2
from c4.proto.codec import BatchError, concat, decode_ops, encode_ops
from collectors.sidecar.errors import LogCorrupt, LogFull
from collectors.sidecar.wal import Log, Pos

log = logging.getLogger(__name__)

KIND_FRAME, KIND_REQUEST, KIND_CUT, KIND_FRAME_Z = 1, 2, 3, 4  # FRAME_Z: zlib-compressed
_FRAME_HEAD = struct.Struct("<IIQIH")  # uid, pid, frame number, records, length of collector id
_CUT_HEAD = struct.Struct("<QIH")      # seq, frames, length of the sidecar id
_CUT_FRAME = struct.Struct("<QQII")    # segment, offset, length, records
LEGACY_SUFFIX = ".c4spill"             # spill segments written before the log existed
# Room kept free of frames so that the cuts completing them still fit.
CUT_RESERVE_FRACTION = 64

Key = tuple[str, int]  # (job, attempt)


@dataclass
class FrameRef:
    """One op frame in the log."""

    pos: Pos
    lsn: int
    records: int
    key: Key


@dataclass
class Held:
    """What one unacknowledged request keeps in the log, and how to rebuild it from there."""

    lsns: list[int] = field(default_factory=list)        # its records (0: from an earlier run)
    segments: list[int] = field(default_factory=list)    # one per record it keeps alive
    request: Pos | None = None                           # its REQUEST record, or
    frames: list[FrameRef] = field(default_factory=list)  # the frames its CUT names

    @property
    def loadable(self) -> bool:
        return self.request is not None or bool(self.frames)


@dataclass
class Recovered:
    """A request found in the log at start-up, not known to be acknowledged."""

    sidecar: str
    seq: int
    kind: str
    records: int
    held: Held


@dataclass
class Recovery:
    requests: list[Recovered] = field(default_factory=list)
    frames: list[FrameRef] = field(default_factory=list)       # never cut: batch them afresh
    # (uid, collector id) -> highest frame number in the log
    watermarks: dict[tuple[int, str], int] = field(default_factory=dict)
    corrupt_regions: int = 0
    lost_records: int = 0  # records of frames not yet batched that failed their checksum


@dataclass
class Loaded:
    request: c4_pb2.IngestRequest | None
    lost_records: int = 0  # records of frames that failed their checksum


def _frame_head(uid: int, pid: int, cid: str, fno: int, records: int) -> bytes:
    """What a frame record holds before the frame itself (written apart: frames are large)."""
    cid_b = cid.encode()[:1024]
    return _FRAME_HEAD.pack(uid & 0xFFFFFFFF, pid & 0xFFFFFFFF, fno & (2**64 - 1),
                            records & 0xFFFFFFFF, len(cid_b)) + cid_b


@dataclass
class _FrameParts:
    uid: int
    pid: int
    cid: str
    fno: int
    records: int
    body: bytes
    start: int  # where the collector's frame begins in ``body``
    compressed: bool

    @property
    def raw(self) -> bytes:
        data = self.body[self.start:]
        return zlib.decompress(data) if self.compressed else data


def _frame_parts(body: bytes, kind: int = KIND_FRAME) -> _FrameParts:
    uid, pid, fno, records, n = _FRAME_HEAD.unpack_from(body, 0)
    start = _FRAME_HEAD.size
    cid = body[start:start + n].decode(errors="replace")
    return _FrameParts(uid, pid, cid, fno, records, body, start + n, kind == KIND_FRAME_Z)


def _cut_body(sidecar: str, seq: int, frames: list[FrameRef]) -> bytes:
    sid = sidecar.encode()
    return b"".join([_CUT_HEAD.pack(seq, len(frames), len(sid)), sid,
                     *(_CUT_FRAME.pack(f.pos.segment, f.pos.offset, f.pos.length, f.records)
                       for f in frames)])


def _cut_parts(body: bytes) -> tuple[str, int, list[tuple[Pos, int]]]:
    seq, n, sid_len = _CUT_HEAD.unpack_from(body, 0)
    off = _CUT_HEAD.size
    sid = body[off:off + sid_len].decode(errors="replace")
    off += sid_len
    frames = []
    for _ in range(n):
        segment, offset, length, records = _CUT_FRAME.unpack_from(body, off)
        frames.append((Pos(segment, offset, length), records))
        off += _CUT_FRAME.size
    return sid, seq, frames


class Spill:
    """See module docstring. Thread-safe; appends may come from several threads."""

    def __init__(self, directory: Path | None, max_bytes: int, *,
                 sync_interval_s: float = 1.0, segment_bytes: int = 0) -> None:
        self.max_bytes = max_bytes
        self.sync_interval_s = sync_interval_s
        self._log = Log(directory, max_bytes=max_bytes, segment_bytes=segment_bytes) \
            if directory is not None else None
        self.dir = Path(directory) if directory is not None else None
        self._lock = threading.Condition(threading.Lock())
        self._lsn = 0            # LSN of the last record appended
        self._durable = 0        # every record up to this LSN is on disk
        self._outstanding: set[int] = set()                # LSNs still needed (undelivered)
        self._unsynced: deque[tuple[int, float]] = deque()  # (LSN, written at), oldest first
        self._refs: dict[int, int] = {}
        self._full = False       # the last append found no room
        self._last_segment = -1
        self._closed = False
        self._syncer: threading.Thread | None = None
        self.syncs = 0
        self.sync_seconds = 0.0
        self.recovery = self._recover() if self._log is not None else Recovery()

    # -- state ---------------------------------------------------------------------------------
    @property
    def logged(self) -> bool:
        """False for a memory-only spill (``Spill(None, ...)``)."""
        return self._log is not None

    @property
    def bytes(self) -> int:
        return self._log.bytes if self._log is not None else 0

    def segments(self) -> list[int]:
        return self._log.segments() if self._log is not None else []

    # -- appending -----------------------------------------------------------------------------
    def append_frame(self, uid: int, pid: int, cid: str, fno: int, raw: bytes, records: int,
                     key: Key, *, compress: bool = False) -> FrameRef:
        """Log one collector op frame (``compress``: zlib it, for a long wait on disk); raises
        ``LogFull`` when there is no room."""
        reserve = self.max_bytes // CUT_RESERVE_FRACTION
        kind = KIND_FRAME
        if compress and self._log is not None:
            kind, raw = KIND_FRAME_Z, zlib.compress(raw, 1)
        pos, lsn = self._append(kind, _frame_head(uid, pid, cid, fno, records), raw, reserve)
        return FrameRef(pos, lsn, records, key)

    def append_request(self, req: c4_pb2.IngestRequest) -> Held:
        """Log a whole request (it carries its sidecar and seq); raises ``LogFull``."""
        pos, lsn = self._append(KIND_REQUEST, b"", req.SerializeToString(), 0)
        if self._log is None:
            return Held()
        return Held(lsns=[lsn], segments=[pos.segment], request=pos)

    def append_cut(self, sidecar: str, seq: int, frames: list[FrameRef]) -> Held:
        """Log that request (sidecar, seq) is ``frames`` merged. The frames' own references pass
        to the returned ``Held``. If the cut does not fit, the request is held unlogged: it can
        still be rebuilt from its frames, but after a crash they would be batched afresh."""
        held = Held(lsns=[f.lsn for f in frames if self._log],
                    segments=[f.pos.segment for f in frames if self._log], frames=list(frames))
        if self._log is None:
            return held
        try:
            pos, lsn = self._append(KIND_CUT, b"", _cut_body(sidecar, seq, frames), 0)
        except LogFull:
            log.warning("no room for the cut of request %s/%d: it is delivered, but a crash "
                        "before the daemon acknowledges it would send its records again",
                        sidecar, seq)
            return held
        held.lsns.append(lsn)
        held.segments.append(pos.segment)
        return held

    def _append(self, kind: int, head: bytes, body: bytes, reserve: int) -> tuple[Pos, int]:
        if self._log is None:
            return Pos(0, 0, 0), 0
        with self._lock:
            try:
                pos = self._log.append_one(kind, head, body, reserve=reserve)
            except LogFull:
                if not self._full:
                    self._full = True
                    self._reclaim()  # an unreferenced current segment can go now
                raise
            self._full = False
            self._lsn += 1
            self._outstanding.add(self._lsn)
            self._unsynced.append((self._lsn, time.monotonic()))
            self._refs[pos.segment] = self._refs.get(pos.segment, 0) + 1
            if self._syncer is None and not self._closed:
                self._syncer = threading.Thread(target=self._sync_loop, name="c4-wal-sync",
                                                daemon=True)
                self._syncer.start()
            if len(self._unsynced) == 1:  # the sync thread may be waiting for a first one
                self._lock.notify_all()
            if pos.segment != self._last_segment:
                self._last_segment = pos.segment
                self._reclaim()  # the segment this append sealed may be unreferenced
            return pos, self._lsn

    # -- durability ----------------------------------------------------------------------------
    def _sync_due(self) -> float | None:
        """Seconds until a record is undelivered for a whole interval (<= 0: now); None if no
        record waits unsynced. Lock held."""
        unsynced = self._unsynced
        while unsynced and (unsynced[0][0] not in self._outstanding or
                            unsynced[0][0] <= self._durable):
            unsynced.popleft()  # delivered (or synced) meanwhile: needs no fsync
        if not unsynced:
            return None
        return unsynced[0][1] + self.sync_interval_s - time.monotonic()

    def _sync_loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed:
                    due = self._sync_due()
                    if due is not None and due <= 0:
                        break
                    self._lock.wait(due)
                if self._closed:
                    return  # close() syncs
            self.sync()

    def sync(self) -> None:
        """fsync now; every record appended before this call is durable when it returns."""
        if self._log is None:
            return
        with self._lock:
            target = self._lsn
        if target <= self._durable:
            return
        t0 = time.perf_counter()
        try:
            self._log.sync()
        except OSError as exc:
            log.error("fsync of the spill failed (%s): records stay unconfirmed until the next "
                      "sync succeeds", exc)
            return
        with self._lock:
            self.syncs += 1
            self.sync_seconds += time.perf_counter() - t0
            self._durable = max(self._durable, target)

    # -- reading -------------------------------------------------------------------------------
    def load(self, held: Held, sidecar: str, seq: int) -> Loaded:
        """Rebuild a request from the log (``request`` None when nothing of it is readable)."""
        assert self._log is not None
        if held.request is not None:
            try:
                _, body = self._log.read(held.request)
                req = c4_pb2.IngestRequest.FromString(body)
            except (LogCorrupt, ValueError) as exc:
                log.error("request %s/%d is lost: %s", sidecar, seq, exc)
                return Loaded(None)
            return Loaded(req)
        parts, lost, key = [], 0, None
        for frame in held.frames:
            try:
                kind, body = self._log.read(frame.pos)
                msg = c4_pb2.IngestRequest.FromString(_frame_parts(body, kind).raw)
                parts.append(decode_ops(msg.ops))
                key = (msg.ops.job, msg.ops.attempt)
            except (LogCorrupt, ValueError, BatchError, zlib.error) as exc:
                lost += frame.records
                log.error("a frame of %d records in request %s/%d is lost: %s", frame.records,
                          sidecar, seq, exc)
        if key is None:
            return Loaded(None, lost)
        ops = encode_ops(key[0], concat(parts), attempt=key[1])
        return Loaded(c4_pb2.IngestRequest(sidecar=sidecar, seq=seq, ops=ops), lost)

    # -- references ----------------------------------------------------------------------------
    def release(self, held: Held) -> None:
        """The request is acknowledged (or given up): its records may go."""
        self._unhold(held.segments, held.lsns)

    def _unhold(self, segments: list[int], lsns: list[int]) -> None:
        if not segments:
            return
        with self._lock:
            self._outstanding.difference_update(lsns)
            for s in segments:
                left = self._refs.get(s, 0) - 1
                if left > 0:
                    self._refs[s] = left
                else:
                    self._refs.pop(s, None)
            self._reclaim()

    def _reclaim(self) -> None:
        """Delete the oldest unreferenced segments (see module docstring); lock held."""
        assert self._log is not None
        for segment in self._log.segments():
            if self._refs.get(segment, 0) > 0:
                return
            if segment == self._log.current and not self._full:
                return  # still being appended to; it goes once sealed (or the disk fills)
            self._log.remove(segment)

    def close(self) -> None:
        """Make everything durable, stop the sync thread, close the files, delete the segments
        nothing needs."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._syncer is not None:
            self._syncer.join(10)
        self.sync()
        if self._log is not None:
            self._log.close()
            # the segment appended to last is sealed now: once everything was delivered the
            # directory is left empty, which is how a job's epilog tells that nothing is left
            with self._lock:
                self._reclaim()

    # -- recovery ------------------------------------------------------------------------------
    def _recover(self) -> Recovery:
        """Index what a previous sidecar left: see ``Recovery``."""
        assert self._log is not None
        out = Recovery()
        uncut: dict[Pos, FrameRef] = {}
        for segment in self._log.segments():
            for pos, kind, body in self._log.scan(segment):
                try:
                    self._recover_record(out, uncut, pos, kind, body)
                except (struct.error, ValueError) as exc:
                    out.corrupt_regions += 1
                    log.error("spill record at %d of segment %s is unreadable (%s); skipped",
                              pos.offset, segment, exc)
        for frame in uncut.values():
            try:
                kind, body = self._log.read(frame.pos)
                ops = c4_pb2.IngestRequest.FromString(_frame_parts(body, kind).raw).ops
            except (LogCorrupt, ValueError, zlib.error) as exc:
                out.corrupt_regions += 1
                out.lost_records += frame.records
                log.error("a frame of %d records not yet batched is lost: %s", frame.records, exc)
                continue
            frame.key = (ops.job, ops.attempt)
            out.frames.append(frame)
        for frame in out.frames:
            self._refs[frame.pos.segment] = self._refs.get(frame.pos.segment, 0) + 1
        for r in out.requests:
            for s in r.held.segments:
                self._refs[s] = self._refs.get(s, 0) + 1
        out.corrupt_regions += self._log.corrupt_regions
        self._import_legacy(out)
        with self._lock:
            self._reclaim()
        if out.requests or out.frames:
            log.info("spill: %d unacknowledged requests and %d frames not yet batched found "
                     "from an earlier run; they are sent again", len(out.requests),
                     len(out.frames))
        return out

    def _recover_record(self, out: Recovery, uncut: dict[Pos, FrameRef], pos: Pos, kind: int,
                        body: bytes) -> None:
        if kind in (KIND_FRAME, KIND_FRAME_Z):
            # only the header: most frames turn out to be cut, and are never parsed here
            head = _frame_parts(body, kind)
            uncut[pos] = FrameRef(pos, 0, head.records, ("", 0))
            if head.cid:
                key = (head.uid, head.cid)
                out.watermarks[key] = max(out.watermarks.get(key, 0), head.fno)
        elif kind == KIND_REQUEST:
            req = c4_pb2.IngestRequest.FromString(body)
            body_kind = req.WhichOneof("body") or "none"
            records = req.ops.count if body_kind == "ops" else 0
            out.requests.append(Recovered(req.sidecar, req.seq, body_kind, records,
                                          Held(segments=[pos.segment], request=pos)))
        elif kind == KIND_CUT:
            sid, seq, named = _cut_parts(body)
            frames = []
            for fpos, records in named:
                frame = uncut.pop(fpos, None)
                # a frame the scan lost to corruption is still named: loading it fails, counted
                frames.append(frame or FrameRef(fpos, 0, records, ("", 0)))
            held = Held(segments=[f.pos.segment for f in frames] + [pos.segment], frames=frames)
            out.requests.append(Recovered(sid, seq, "ops", sum(f.records for f in frames), held))
        else:
            raise ValueError(f"unknown record kind {kind}")

    def _import_legacy(self, out: Recovery) -> None:
        """Move segments of the spill format before this log into it (once, at upgrade)."""
        from collectors.wire import FrameError, decode_frames

        assert self.dir is not None
        for path in sorted(self.dir.glob(f"*{LEGACY_SUFFIX}")):
            buf = bytearray(path.read_bytes())
            try:
                reqs = decode_frames(buf)
            except FrameError as exc:  # no checksums in that format: keep what came before
                log.error("old spill segment %s is corrupt after its sound requests (%s)",
                          path.name, exc)
                reqs = []
            for req in reqs:
                held = self.append_request(req)
                body_kind = req.WhichOneof("body") or "none"
                out.requests.append(Recovered(req.sidecar, req.seq, body_kind,
                                              req.ops.count if body_kind == "ops" else 0, held))
            self.sync()
            path.unlink()
            log.info("moved %d requests of old spill segment %s into the log", len(reqs),
                     path.name)
