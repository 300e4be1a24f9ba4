"""Glue: local listener -> batcher -> outbox -> daemon, plus link counters and own statistics."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from collectors.sidecar.batcher import Batcher
from collectors.sidecar.config import SidecarConfig
from collectors.sidecar.edge import Edge
from collectors.sidecar.local import LocalListener
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.spill import Spill
from diagnosis.security.channel import ClientSecurity
from proto import c4_pb2
from proto.codec import BatchError

log = logging.getLogger(__name__)


def _link_sampler() -> Any:
    try:
        from collectors.linkstats import LinkSampler
    except ImportError:
        return None
    return LinkSampler


class Sidecar:
    def __init__(self, config: SidecarConfig) -> None:
        self.config = config
        self.id = f"{config.host}-{uuid.uuid4().hex[:8]}"
        self.spill = Spill(config.spill_dir, config.spill_max_bytes)
        security = ClientSecurity.from_env(tls_ca=config.tls_ca, tls_cert=config.tls_cert,
                                           tls_key=config.tls_key, token=config.token)
        self.outbox = Outbox(self.id, self.spill, memory_max_bytes=config.memory_max_bytes,
                             max_inflight=config.max_inflight,
                             spill_after_s=config.spill_after_s, security=security)
        self.metrics_server: Any = None
        # what leaves the node per job (reduction, ports, detail ring): collectors.sidecar.edge
        self.edge = Edge(config.host, config.edge, self.outbox.put,
                         lambda job, attempt, cols: self.batcher.add_columns(job, attempt, cols))
        self.outbox.on_control = self.edge.on_control
        self.batcher = Batcher(self.edge.emit, batch_records=config.batch_records,
                               flush_interval_s=config.flush_interval_s)
        self.listener = LocalListener(config.socket_path, self._on_frame)
        self._lock = threading.Lock()
        self.received = 0
        self.rejected = 0
        self._collectors: dict[tuple[str, int], c4_pb2.CollectorStats] = {}
        # (job, attempt) -> {rank: pid}, for the link counters of the ranks' sockets
        self._pids: dict[tuple[str, int], dict[int, int]] = {}
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._threads = [
            threading.Thread(target=self._ship, name="c4-outbox", daemon=True),
            threading.Thread(target=self._tick, name="c4-tick", daemon=True),
        ]
        sampler = _link_sampler()
        self._sampler_cls = sampler
        self._samplers: dict[tuple[str, int], Any] = {}

    # -- frames from the ranks ----------------------------------------------------------
    def _on_frame(self, req: c4_pb2.IngestRequest) -> None:
        kind = req.WhichOneof("body")
        if kind == "ops":
            try:
                self.edge.add_ops(req.ops)
            except BatchError as exc:
                with self._lock:
                    self.rejected += 1
                log.error("dropping a malformed batch from a collector: %s", exc)
                return
            with self._lock:
                self.received += req.ops.count
        elif kind == "rank":
            with self._lock:
                self._pids.setdefault((req.rank.job, req.rank.attempt), {})[req.rank.rank] = \
                    req.rank.pid
            self.edge.job(req.rank.job, req.rank.attempt)
            self.batcher.passthrough(rank=req.rank)
        elif kind == "group":
            self.batcher.passthrough(group=req.group)
        elif kind == "stats":
            with self._lock:
                for c in req.stats.collectors:
                    self._collectors[(c.job, c.rank)] = c
        else:
            with self._lock:
                self.rejected += 1
            log.error("dropping a collector frame with body %r", kind)

    # -- background work ------------------------------------------------------------------
    def _ship(self) -> None:
        self.outbox.run(self.config.daemon, self._stopped,
                        reconnect_max_s=self.config.reconnect_max_s)

    def _tick(self) -> None:
        last_link = last_stats = 0.0
        import time

        while not self._stop.wait(min(self.config.flush_interval_s, 0.1)):
            self.batcher.flush_due()
            self.edge.tick()
            now = time.monotonic()
            if now - last_link >= self.config.link_interval_s:
                last_link = now
                self._sample_links()
            if now - last_stats >= self.config.stats_interval_s:
                last_stats = now
                self.outbox.put(stats=self.stats())

    def _sample_links(self) -> None:
        if self._sampler_cls is None:
            return
        with self._lock:
            jobs = {k: dict(v) for k, v in self._pids.items()}
        for (job, attempt), pids in jobs.items():
            try:
                sampler = self._samplers.get((job, attempt))
                if sampler is None:
                    sampler = self._samplers[(job, attempt)] = self._sampler_cls(pids)
                sampler.set_ranks(pids)
                cols = sampler.sample()
            except Exception:
                log.exception("link counter sampling failed for job %s", job)
                continue
            if len(cols):
                self.edge.add_conns(job, attempt, cols)

    def stats(self) -> c4_pb2.SidecarStats:
        s = self.outbox.stats
        with self._lock:
            e = self.edge.stats
            return c4_pb2.SidecarStats(
                host=self.config.host, received=self.received, shipped=s.shipped,
                spilled=s.spilled, dropped=s.dropped, rejected=self.rejected + s.rejected,
                spill_bytes=self.spill.bytes, collectors=list(self._collectors.values()),
                records_out=e.records_out, bytes_out=e.bytes_out, late_steps=e.late_steps,
                detail_refused=e.detail_refused, detail_records=e.detail_rows)

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.listener.start()
        for t in self._threads:
            t.start()
        if self.config.metrics_listen:
            from collectors.sidecar.metrics import serve_metrics

            self.metrics_server = serve_metrics(self, self.config.metrics_listen)
        log.info("sidecar %s listening on %s, shipping to %s", self.id,
                 self.config.socket_path, self.config.daemon)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop listening, flush, and deliver (or spill) everything before returning."""
        self.listener.stop()
        self._stop.set()
        self.edge.drain()
        self.batcher.flush_due(force=True)
        self._stopped.set()
        self._threads[0].join(timeout)
        if not self.outbox.idle():
            self.outbox.spill_now("sidecar stopping")
        for sampler in self._samplers.values():
            sampler.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
