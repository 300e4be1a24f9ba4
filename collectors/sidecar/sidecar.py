"""Glue: local listener -> intake (-> log) -> batcher -> outbox -> daemon, plus link counters
and the sidecar's own statistics."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

from c4.errors import C4Error
from c4.proto import c4_pb2
from c4.proto.codec import collector_columns
from c4.security.channel import ClientSecurity
from collectors.sidecar.batcher import Batcher
from collectors.sidecar.config import SidecarConfig
from collectors.sidecar.counters import Drops
from collectors.sidecar.discovery import HostDiscovery, make_runner, port_map
from collectors.sidecar.edge import Edge
from collectors.sidecar.errors import SidecarConfigError
from collectors.sidecar.intake import Intake
from collectors.sidecar.local import Limits, LocalListener, resolve_group
from collectors.sidecar.metrics import serve_metrics
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.owners import Owners
from collectors.sidecar.spill import Spill

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
        self.drops = Drops()
        # Opening the log recovers what an earlier sidecar left there; the outbox queues it.
        self.spill = Spill(config.spill_dir if config.wal else None, config.spill_max_bytes,
                           sync_interval_s=config.wal_sync_interval_s)
        if self.spill.recovery.lost_records:
            self.drops.add("corrupt", records=self.spill.recovery.lost_records)
        security = ClientSecurity.from_env(tls_ca=config.tls_ca, tls_cert=config.tls_cert,
                                           tls_key=config.tls_key, token=config.token)
        self.outbox = Outbox(self.id, self.spill, memory_max_bytes=config.memory_max_bytes,
                             max_inflight=config.max_inflight, security=security,
                             drops=self.drops, max_request_bytes=config.max_request_bytes)
        self.metrics_server: Any = None
        # what leaves the node per job (reduction, ports, detail ring): collectors.sidecar.edge
        self.edge = Edge(config.host, config.edge, self.outbox.put, self.outbox.put_frames,
                         lambda cols, frame, nbytes: self.batcher.add(cols, frame, nbytes))
        self.outbox.on_control = self._on_control
        self.batcher = Batcher(self.edge.emit_frames, batch_records=config.batch_records,
                               flush_interval_s=config.flush_interval_s)
        self.owners = Owners(config.spill_dir)
        # the intake hands logged batches to the edge, which passes the rows to ship on to
        # the batcher
        self.intake = Intake(spill=self.spill, outbox=self.outbox, batcher=self.edge,
                             owners=self.owners, drops=self.drops,
                             max_collectors=config.max_collectors)
        limits = Limits(max_frame_bytes=config.max_frame_bytes,
                        max_buffered_bytes=config.max_buffered_bytes,
                        frame_timeout_s=config.frame_timeout_s,
                        max_connections=config.max_connections)
        self.listener = LocalListener(config.socket_path, self.intake.take,
                                      mode=config.socket_mode,
                                      gid=resolve_group(config.socket_group), limits=limits)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._threads = [
            threading.Thread(target=self._ship, name="c4-outbox", daemon=True),
            threading.Thread(target=self._tick, name="c4-tick", daemon=True),
        ]
        self.nccl = None
        if config.nccl is not None:
            from collectors.sidecar.nccl_source import NcclSource

            self.nccl = NcclSource(config.nccl, config.host, self.edge.emit, self._hooked_pids)
            self._threads.append(threading.Thread(target=self.nccl.run, args=(self._stop,),
                                                  name="c4-nccl", daemon=True))
        self.health = None
        if config.edge.health is not None:
            from collectors.health.watch import HealthWatch

            self.health = HealthWatch(config.host, config.edge.health,
                                      nic_map=dict(config.edge.nic_map))
            self._health_thread = threading.Thread(target=self._watch_health, name="c4-health",
                                                   daemon=True)
            self._threads.append(self._health_thread)
        self._sampler_cls = _link_sampler()
        try:
            runner = make_runner(config.discover, config.discover_timeout_s)
        except C4Error as exc:
            raise SidecarConfigError(f"--discover: {exc}") from None
        self.discovery = None if runner is None else HostDiscovery(
            config.host, self.outbox.put, runner, sysfs_root=config.edge.sysfs_root,
            interval_s=config.discover_interval_s,
            on_change=lambda hi: self.edge.map_ports(port_map(hi)))
        self._samplers: dict[tuple[str, int], Any] = {}

    def _on_control(self, msg: c4_pb2.Control) -> None:
        """The daemon's messages: inspections here (they take seconds: a thread of their own),
        the rest to the edge."""
        if msg.WhichOneof("body") == "inspect":
            threading.Thread(target=self._inspect, args=(msg.inspect,), name="c4-inspect",
                             daemon=True).start()
        elif msg.WhichOneof("body") == "group":
            if self.nccl is not None:
                self.nccl.learn(msg.group)
        else:
            self.edge.on_control(msg)

    def _inspect(self, req: c4_pb2.InspectRequest) -> None:
        """Look at the process that registered the rank here (the pid this sidecar saw on its
        socket, never one the request names) and answer with the facts."""
        from diagnosis.inspection import inspect_process

        pid = self.intake.pids().get((req.job, req.attempt), {}).get(req.rank, 0)
        if pid <= 0:
            log.warning("the daemon asks about rank %d of job %s, which did not register here",
                        req.rank, req.job)
            return
        facts = inspect_process(req.rank, self.config.host, pid, backend=req.backend,
                                local=True)
        log.info("inspected rank %d of job %s (pid %d) for fault %s", req.rank, req.job, pid,
                 req.fault_id)
        self.outbox.put(inspection=c4_pb2.InspectResult(
            request=req.request, fault_id=req.fault_id, host=self.config.host, rank=req.rank,
            facts_json=json.dumps(facts.to_json())))

    # -- background work ------------------------------------------------------------------
    def _ship(self) -> None:
        self.outbox.run(self.config.daemon, self._stopped,
                        reconnect_max_s=self.config.reconnect_max_s)

    def _tick(self) -> None:
        last_link = last_stats = 0.0
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

    def _hooked_pids(self) -> set[int]:
        """The processes whose torch hook delivers the NCCL job's records already."""
        assert self.config.nccl is not None
        key = (self.config.nccl.job, self.config.nccl.attempt)
        return set(self.intake.pids().get(key, {}).values())

    def _watch_health(self) -> None:
        """Node health every interval, on its own thread: nvidia-smi may take a few hundred
        milliseconds, which the windows' tick must not wait for."""
        assert self.health is not None
        interval = self.health.config.interval_s
        while not self._stop.wait(interval):
            try:
                self.edge.add_health(self.health.poll())
            except Exception:
                log.exception("health sampling failed")

    def _sample_links(self) -> None:
        if self._sampler_cls is None:
            return
        for (job, attempt), pids in self.intake.pids().items():
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
        """What the daemon (``c4 status``) shows of this sidecar: ``received`` and ``dropped``
        count op records (dropped: for every reason, see ``counters.REASONS``); ``shipped``,
        ``spilled`` (read back from the log) and ``rejected`` count requests, ``rejected``
        also the frames refused locally."""
        s = self.outbox.stats
        e = self.edge.stats
        return c4_pb2.SidecarStats(
            host=self.config.host, received=self.intake.received, shipped=s.shipped,
            spilled=s.spilled, dropped=self.drops.records_total(),
            rejected=s.rejected + self.drops.frames_total(), spill_bytes=self.spill.bytes,
            collector_columns=collector_columns(self.intake.collectors.values()),
            records_out=e.records_out,
            bytes_out=e.bytes_out, late_steps=e.late_steps, detail_refused=e.detail_refused,
            detail_records=e.detail_rows)

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.listener.start()
        for t in self._threads:
            t.start()
        if self.discovery is not None:
            self.discovery.start()
        if self.config.metrics_listen:
            self.metrics_server = serve_metrics(self, self.config.metrics_listen)
        log.info("sidecar %s listening on %s, shipping to %s", self.id,
                 self.config.socket_path, self.config.daemon)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop listening, log what is batched, deliver what the daemon will take within
        ``timeout``; the log keeps the rest for the next sidecar on this spill directory."""
        self.listener.stop()
        if self.discovery is not None:
            self.discovery.stop()
        self._stop.set()
        for t in self._threads[1:]:
            t.join(timeout)
        if self.health is not None:
            self.health.close()
        self.edge.drain()
        self.batcher.flush_due(force=True)
        self._stopped.set()
        self._threads[0].join(timeout)
        self.outbox.abandon()
        self.spill.close()
        for sampler in self._samplers.values():
            sampler.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
