"""The background thread that ships a rank's rows to its node's sidecar.

Every ``flush_interval_s`` (sooner when the buffer is half full) it sends, over the Unix socket of
``collectors.wire``: the groups announced since the last cycle, the completed rows as ``OpBatch``
frames, calls pending longer than ``open_after_s`` once as open rows (``t_end_ns = -1``), and about
once a second a stats frame. While the sidecar is missing it retries with exponential backoff and
the rows wait in the bounded buffer (the hooks drop and count what does not fit); after every
(re)connection it first sends the ``RankInfo`` and every group known so far. A frame that the
sidecar does not take whole within ``send_timeout_s`` goes back to the front of the buffer for
the next connection (it never arrived complete, so this cannot duplicate rows): nothing here ever
waits on the training thread's behalf.

Op frames carry this collector's id and a frame number, and are kept (up to
``MAX_UNACKED_BYTES``) until the sidecar acknowledges them, which it does once they are in its
write-ahead log (``collectors/wire.py``). After a reconnection the frames not acknowledged go
again, first: a sidecar that was killed loses nothing it had not yet taken, and one that had
taken them recognizes them. A sidecar that never acknowledges (an older one) gets no resends.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from c4.proto import c4_pb2
from c4.proto.codec import encode_ops
from collectors.buffer import RecordBuffer, build_columns, error_key
from collectors.config import CollectorConfig
from collectors.wire import FrameError, decode_acks, encode_frame, read_available

log = logging.getLogger(__name__)

# Rows per OpBatch frame: ~60 bytes a row keeps frames well under the wire's limit.
MAX_ROWS_PER_FRAME = 8192
# In the final cycle: ~60 KB frames, each taken whole by the socket buffer as it is written.
FINAL_ROWS_PER_FRAME = 1024
STATS_EVERY_S = 1.0
_FIRST_BACKOFF_S = 0.05
# Poll async Works this long after the last time one was seen outstanding.
POLL_ACTIVE_S = 1.0
# Op frames kept for a resend until the sidecar acknowledges them; past this the oldest are let
# go (a sidecar that is slow to acknowledge still gets every frame once).
MAX_UNACKED_BYTES = 8 << 20


class Shipper:
    """Owns the socket and the thread; see module docstring."""

    def __init__(self, config: CollectorConfig, buffer: RecordBuffer, rank_info: c4_pb2.RankInfo,
                 before_cycle: Callable[[], None] | None = None,
                 poll: Callable[[], int] | None = None,
                 outstanding: Callable[[], bool] | None = None) -> None:
        self.config = config
        self.buffer = buffer
        self.rank_info = rank_info
        self._before_cycle = before_cycle
        # completion of async Works that nobody waits for yet (completion.Completion.poll)
        self._poll = poll
        self._outstanding = outstanding
        self._poll_seen = -POLL_ACTIVE_S  # when a poll last found outstanding Works
        self.shipped = 0
        self.dropped_send = 0
        self.connects = 0
        self._sock: socket.socket | None = None
        self._timeout = config.send_timeout_s
        # the acknowledged wire: this process's id, its op frames' numbers, the frames sent and
        # not yet acknowledged (number -> frame), and whether this sidecar acknowledges at all
        self.collector_id = f"{rank_info.host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._fno = 0
        self._unacked: OrderedDict[int, bytes] = OrderedDict()
        self._unacked_bytes = 0
        self._acks = bytearray()
        self._acknowledging = False
        self._refused_logged = False
        self.resent = 0
        self._next_connect = 0.0
        self._backoff = _FIRST_BACKOFF_S
        # since when no sidecar could be reached (None: connected), and whether that was said
        self._unreachable_since: float | None = time.monotonic()
        self._unreachable_said = False
        self._groups_sent = 0
        self._open_reported: set[int] = set()
        self._last_stats = 0.0
        self._cycles = 0          # cycles finished
        self._started = 0         # cycles started
        # set by flush(urgent=True): the next cycle connects at once and reports every pending
        # call as open, however young (a SIGTERM that the program handles itself)
        self._urgent = False
        self._cycle_done = threading.Condition()
        self._stop = threading.Event()
        # the hooks captured this Event at install time: share it, never replace it
        self._wake = buffer.wake
        self._thread = threading.Thread(target=self._run, name="c4-collector-shipper", daemon=True)

    # ------------------------------------------------------------------ control
    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def flush(self, timeout: float, urgent: bool = False) -> bool:
        """Ask for a cycle now and wait for it (at most ``timeout``); True if one completed.

        ``urgent``: that cycle also skips the reconnection backoff and ships every pending call
        as an open row, as the final one does.
        """
        with self._cycle_done:
            target = self._started + 1  # a cycle that starts after this call has finished
            if urgent:
                self._urgent = True
            self._wake.set()
            return self._cycle_done.wait_for(lambda: self._cycles >= target or not self.alive(),
                                              timeout)

    def stop(self, timeout: float) -> None:
        """Final cycle (pending calls go out as open rows), stats, close; waits ``timeout``."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def dropped(self) -> int:
        return self.buffer.dropped_full + self.dropped_send

    # ------------------------------------------------------------------ thread
    def _run(self) -> None:
        interval, poll_s = self.config.flush_interval_s, self.config.poll_interval_s
        next_cycle = time.monotonic() + interval
        while not self._stop.is_set():
            now = time.monotonic()
            timeout = next_cycle - now
            # Async calls come in bursts (a step's overlapped collectives): once one is seen
            # outstanding, keep polling for a while, since the next may start and end while
            # this thread sleeps a whole flush interval.
            if self._outstanding is not None and self._outstanding():
                self._poll_seen = now
            polling = now < self._poll_seen + POLL_ACTIVE_S
            if polling:
                timeout = min(timeout, poll_s)
            woke = self._wake.wait(max(timeout, 0.0))
            if self._stop.is_set():
                break  # straight to the final cycle
            if polling:
                self._guarded_poll()
            if woke or time.monotonic() >= next_cycle:
                self._wake.clear()
                self._guarded_cycle(final=False)
                next_cycle = time.monotonic() + interval
        self._guarded_cycle(final=True)
        self._close()
        # Whatever is still buffered now (no sidecar at exit) is lost: count it.
        self.dropped_send += len(self.buffer.take(self.buffer.capacity))

    def _guarded_poll(self) -> None:
        """Poll async Works; remember when some were outstanding."""
        try:
            if self._poll is not None and self._poll():
                self._poll_seen = time.monotonic()
        except Exception:
            log.exception("c4 collector: polling async calls failed")

    def _guarded_cycle(self, final: bool) -> None:
        with self._cycle_done:
            self._started += 1
        try:
            self._cycle(final)
        except Exception:  # a bug here must not kill shipping for the rest of the job
            log.exception("c4 collector: shipping cycle failed")
        with self._cycle_done:
            self._cycles += 1
            self._cycle_done.notify_all()

    def _cycle(self, final: bool) -> None:
        if self._before_cycle is not None:
            self._before_cycle()
        self._guarded_poll()  # completions seen now go out in this cycle
        urgent, self._urgent = self._urgent, False
        if not self._connected(force=final or urgent):
            return
        if not self._read_acks():
            log.info("c4 collector: sidecar at %s went away; reconnecting",
                     self.config.socket_path)
            self._close()
            self._schedule_reconnect()
            return
        rows: list[tuple] = []
        # Last words (SIGTERM, exit) may be cut off by their time bound: the calls still pending
        # (what the rank is doing) go first, then rows in frames small enough to land whole.
        per_frame = FINAL_ROWS_PER_FRAME if final else MAX_ROWS_PER_FRAME
        try:
            self._send_groups()
            if final:
                self._send_open(True)
            while True:
                rows = self.buffer.take(per_frame)
                if not rows:
                    break
                self._send_rows(rows)
                self.shipped += len(rows)
            rows = []
            if not final:
                self._send_open(urgent)
            now = time.monotonic()
            if final or now - self._last_stats >= STATS_EVERY_S:
                self._send(c4_pb2.IngestRequest(stats=self.stats_message(leaving=final)))
                self._last_stats = now
        except OSError as exc:
            # sendall failed, so the receiver never got this frame whole: resend it later.
            self.dropped_send += self.buffer.give_back(rows)
            log.info("c4 collector: sidecar at %s went away (%s); reconnecting",
                     self.config.socket_path, exc)
            self._close()
            self._schedule_reconnect()

    # ------------------------------------------------------------------ frames
    def stats_message(self, leaving: bool = False) -> c4_pb2.SidecarStats:
        """The collector's counters, as the single entry of a ``SidecarStats``; ``leaving`` in
        its last words, so that a job stopped on purpose is not read as hung."""
        mine = c4_pb2.CollectorStats(job=self.rank_info.job, rank=self.rank_info.rank,
                                     recorded=self.buffer.recorded, dropped=self.dropped(),
                                     shipped=self.shipped, t_ns=time.time_ns(),
                                     attempt=self.rank_info.attempt, leaving=leaving)
        return c4_pb2.SidecarStats(host=self.rank_info.host, collectors=[mine])

    def _send_groups(self) -> None:
        groups = self.buffer.groups
        while self._groups_sent < len(groups):
            info = c4_pb2.GroupInfo()
            info.CopyFrom(groups[self._groups_sent])
            info.job, info.attempt = self.rank_info.job, self.rank_info.attempt
            self._send(c4_pb2.IngestRequest(group=info))
            self._groups_sent += 1

    def _send_rows(self, rows: list[tuple]) -> None:
        errors = self.buffer.errors
        cols = build_columns(rows, self.rank_info.rank, self.buffer.strings.snapshot(), errors)
        batch = encode_ops(self.rank_info.job, cols, attempt=self.rank_info.attempt)
        self._fno += 1
        frame = encode_frame(c4_pb2.IngestRequest(ops=batch, sidecar=self.collector_id,
                                                  seq=self._fno))
        assert self._sock is not None
        self._sock.sendall(frame)
        self._keep(self._fno, frame)
        for i in cols.error_text:  # sent: their error texts are no longer needed
            errors.pop(error_key(rows[i]), None)

    # ------------------------------------------------------------------ acknowledgements
    def _keep(self, fno: int, frame: bytes) -> None:
        self._unacked[fno] = frame
        self._unacked_bytes += len(frame)
        while self._unacked_bytes > MAX_UNACKED_BYTES:
            _, old = self._unacked.popitem(last=False)
            self._unacked_bytes -= len(old)

    def _read_acks(self) -> bool:
        """Take the acknowledgements that arrived; False if the sidecar has gone away."""
        assert self._sock is not None
        alive = read_available(self._sock, self._acks)
        try:
            acks = decode_acks(self._acks)
        except FrameError as exc:
            log.warning("c4 collector: the sidecar sent something other than "
                        "acknowledgements (%s); reconnecting", exc)
            return False
        for ack in acks:
            if not ack.sidecar and not ack.seq:  # hello: this sidecar acknowledges
                self._acknowledging = True
                continue
            if ack.sidecar != self.collector_id:
                continue
            self._acknowledging = True
            if ack.code and not self._refused_logged:
                self._refused_logged = True
                log.warning("c4 collector: the sidecar refuses frames of this rank: %s",
                            ack.error)
            while self._unacked and next(iter(self._unacked)) <= ack.seq:
                _, frame = self._unacked.popitem(last=False)
                self._unacked_bytes -= len(frame)
        return alive

    def unacknowledged(self) -> int:
        """Op frames sent and not yet acknowledged by the sidecar."""
        return len(self._unacked)

    def _resend_unacked(self) -> None:
        """After reconnecting: the frames the last sidecar had not acknowledged, in order."""
        if not self._acknowledging:  # an older sidecar: resending could store rows twice
            self._unacked.clear()
            self._unacked_bytes = 0
            return
        assert self._sock is not None
        for frame in list(self._unacked.values()):
            self._sock.sendall(frame)
            self.resent += 1

    def _send_open(self, every: bool) -> None:
        cutoff = time.time_ns() - int(self.config.open_after_s * 1e9)
        if every:
            cutoff = 1 << 62  # at exit (or SIGTERM) every call still pending is reported open
        rows, tokens = self.buffer.open_rows(cutoff, self._open_reported)
        if rows:
            self._send_rows(rows)
            self._open_reported.update(tokens)

    def _send(self, request: c4_pb2.IngestRequest) -> None:
        assert self._sock is not None
        self._sock.sendall(encode_frame(request))

    # ------------------------------------------------------------------ connection
    def _connected(self, force: bool) -> bool:
        if self._sock is not None:
            return True
        if not force and time.monotonic() < self._next_connect:
            return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        timeout = self.config.send_timeout_s
        if force:
            timeout = min(timeout, max(self.config.exit_flush_s, 0.01))
        sock.settimeout(timeout)
        self._timeout = timeout
        try:
            sock.connect(str(self.config.socket_path))
            self._sock = sock
            self._acks.clear()
            self._groups_sent = 0  # the sidecar may be new: tell it everything again
            self._send(c4_pb2.IngestRequest(rank=self.rank_info))
            self._send_groups()
            self._resend_unacked()
        except OSError as exc:
            sock.close()
            self._sock = None
            log.debug("c4 collector: no sidecar at %s (%s)", self.config.socket_path, exc)
            self._unreachable(exc)
            self._schedule_reconnect()
            return False
        if self._unreachable_said:
            log.warning("c4 collector (rank %d): reached the sidecar at %s after %.0f s",
                        self.rank_info.rank, self.config.socket_path,
                        time.monotonic() - (self._unreachable_since or time.monotonic()))
        self._unreachable_since, self._unreachable_said = None, False
        self.connects += 1
        self._backoff = _FIRST_BACKOFF_S
        log.debug("c4 collector: connected to sidecar at %s", self.config.socket_path)
        return True

    def _unreachable(self, exc: OSError) -> None:
        """Say once, within seconds and not only at exit, that no sidecar takes the calls."""
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
        if not self._unreachable_said and \
                now - self._unreachable_since >= self.config.unreachable_warn_s:
            self._unreachable_said = True
            log.warning("c4 collector (rank %d, job %s): no sidecar at %s for %.0f s (%s); "
                        "calls are kept until %d are waiting, then dropped. Start `c4 sidecar` "
                        "on this node, or point C4_SIDECAR_SOCKET at its socket",
                        self.rank_info.rank, self.rank_info.job, self.config.socket_path,
                        now - self._unreachable_since, exc.strerror or exc,
                        self.buffer.capacity)

    def _schedule_reconnect(self) -> None:
        self._next_connect = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self.config.reconnect_max_s)

    def _close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
