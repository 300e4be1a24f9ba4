"""Assemble the daemon: store, writer, live view, gRPC services, health, clean shutdown."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

import c4
from c4.metrics import MetricsServer, parse_listen
from c4.processes import stop_on_signals, wait_until
from c4.proto import c4_pb2, c4_pb2_grpc
from c4.security.server import AuthInterceptor, ServerTls, add_port, check_listen, is_loopback
from c4.security.tokens import TokenTable
from diagnosis.daemon.admin import AdminService, JobRemover, Retention
from diagnosis.daemon.component_metrics import (
    AuthDenials,
    IngestCollector,
    LiveCollector,
    WriterCollector,
)
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.control import ControlHub
from diagnosis.daemon.decoding import SafeDecode
from diagnosis.daemon.detail import DetailPuller
from diagnosis.daemon.fault_metrics import OpenFaults
from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.heap import HeapCollector, HeapKeeper
from diagnosis.daemon.hosts import HostBook
from diagnosis.daemon.ingest import IngestService
from diagnosis.daemon.inspection import ProcessInspector
from diagnosis.daemon.job_series import JobSeries
from diagnosis.daemon.jobs import JobBook
from diagnosis.daemon.lifecycle import JobLifecycle
from diagnosis.daemon.limits import RateLimiter
from diagnosis.daemon.live import LiveView
from diagnosis.daemon.queries import FaultActionsService, FaultsService, QueryService
from diagnosis.daemon.topology_query import TopologyService
from diagnosis.daemon.writer import Writer
from diagnosis.errors import DiagnosisError
from diagnosis.store import Write, open_store

if TYPE_CHECKING:
    from c4.topology import Topology

log = logging.getLogger(__name__)

SERVICES = ("c4.v1.Ingest", "c4.v1.Faults", "c4.v1.Query", "c4.v1.Admin", "c4.v1.Topology",
            "c4.v1.FaultActions")


class Daemon:
    """The daemon's parts, wired; ``registry`` takes every part's Prometheus collector (a new
    one when None: several daemons in one process keep their metrics apart)."""

    def __init__(self, config: DaemonConfig, *, topology: Topology | None = None,
                 tokens: TokenTable | None = None, topology_source: str = "",
                 registry: CollectorRegistry | None = None) -> None:
        self.config = config
        tls = ServerTls(config.tls_cert, config.tls_key, config.tls_client_ca or None) \
            if config.tls_cert else None
        check_listen(config.listen, tls=tls is not None, insecure=config.insecure)
        self.tokens = tokens if tokens is not None else TokenTable.load(config.tokens_file or None)
        self.registry = registry if registry is not None else \
            CollectorRegistry(auto_describe=True)
        self.store = open_store(config.store)
        self.hub = FaultHub(self.store)
        self.control = ControlHub()
        self.hosts = HostBook(self.store)
        self.heap = HeapKeeper()
        self.live = LiveView(self.hub, topology=topology, store=self.store,
                             hosts=self.hosts, topology_source=topology_source,
                             max_backlog_records=config.live_backlog_records,
                             idle_s=config.jobs.idle_s,
                             gone_after_s=config.jobs.gone_after_s,
                             budget=config.budget, control=self.control,
                             interval_s=config.analyze_interval_s, heap=self.heap)
        self.detail = DetailPuller(self.hub, self.control, self.store.ranks,
                                   self.live.job_reduced, config.detail)
        self.inspector = ProcessInspector(self.hub, self.store.ranks, config.inspect,
                                          ask_node=self.control.request_inspect)
        self.lifecycle = JobLifecycle(self.hub, self.store)
        self.live.on_job_end = self.lifecycle.ended
        self.live.on_job_start = self.lifecycle.started
        self.job_series = JobSeries(max_jobs=config.metrics_jobs, idle_s=config.jobs.idle_s)
        self.writer = Writer(self.store, on_stored=self._stored,
                             commit_interval_s=config.commit_interval_s,
                             max_pending=config.max_pending_requests,
                             max_pending_records=config.max_pending_records)
        self.live.upstream = self.writer.pending_records
        self.live.stored = self.writer.throughput
        # the jobs stored before, with when each was last written to: the live ones count
        # against --max-jobs at once
        self.jobs = JobBook(config.jobs)
        self.jobs.load(self.store.job_seen())
        rate = config.max_requests_per_second
        self.ingest = IngestService(self.writer, self.jobs, bounds=config.bounds,
                                    max_records=config.max_records_per_batch,
                                    limiter=RateLimiter(rate, 2 * rate),
                                    tokens_checked=bool(self.tokens),
                                    max_streams=config.max_streams,
                                    on_stats=self.live.heard, control=self.control,
                                    seed=lambda job: (self.store.ranks(job),
                                                      self.store.groups(job)),
                                    on_host=self.hosts.put)
        self.ingest.on_inspection = self.inspector.answered
        self.open_faults = OpenFaults(self.hub, self.store)
        self.remover = JobRemover(self.store, self.jobs, self.live, self.writer,
                                  on_removed=self._removed)
        self.retention = Retention(self.store, self.remover, config.retention_s) \
            if config.retention_s else None
        self.faults = FaultsService(self.store, self.hub, max_watches=config.max_watches)
        self.denials = AuthDenials(self.registry)
        for collector in (WriterCollector(self.writer), IngestCollector(self.ingest),
                          LiveCollector(self.live), self.open_faults, self.job_series,
                          HeapCollector(self.heap)):
            self.registry.register(collector)
        self.metrics_server: MetricsServer | None = None
        self.started_ns = time.time_ns()
        self._stop = threading.Event()
        self._health = health.HealthServicer()
        interceptors: list[grpc.ServerInterceptor] = [SafeDecode()]
        if self.tokens:
            interceptors.append(AuthInterceptor(self.tokens, self.denials.on_denied))
        if not self.tokens and not config.tls_client_ca:
            log.info("no tokens configured: every client may call every RPC")
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="c4-rpc"),
            interceptors=interceptors, maximum_concurrent_rpcs=config.workers,
            # without this gRPC sets SO_REUSEPORT: a second daemon would bind the same port and
            # the kernel would split clients (and one job's telemetry) between the two
            options=[("grpc.so_reuseport", 0),
                     ("grpc.max_receive_message_length", config.max_message_bytes),
                     ("grpc.max_send_message_length", config.max_message_bytes)])
        c4_pb2_grpc.add_IngestServicer_to_server(self.ingest, self._server)
        c4_pb2_grpc.add_FaultsServicer_to_server(self.faults, self._server)
        c4_pb2_grpc.add_QueryServicer_to_server(QueryService(self.store, self.status,
                                                             self.job_state), self._server)
        c4_pb2_grpc.add_FaultActionsServicer_to_server(FaultActionsService(self.hub),
                                                       self._server)
        c4_pb2_grpc.add_AdminServicer_to_server(AdminService(self.remover), self._server)
        c4_pb2_grpc.add_TopologyServicer_to_server(
            TopologyService(self.store, self.live, self.hosts, topology, topology_source),
            self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        self.port = add_port(self._server, config.listen, tls)
        if self.port == 0:
            self.store.close()
            raise DiagnosisError(f"cannot listen on {config.listen}: the address is in use or "
                                 "not this machine's; stop the daemon already serving it "
                                 "(`c4 status --daemon ADDRESS` shows it) or pick another "
                                 "--listen")
        self._analyzer = threading.Thread(target=self.live.run,
                                          args=(self._stop, config.analyze_interval_s),
                                          name="c4-live", daemon=True)

    def _stored(self, writes: list[Write]) -> None:
        """What the writer stored goes to the per-job series and the live detectors."""
        self.job_series.observe(writes)
        self.live.apply(writes)

    def _removed(self, job: str) -> None:
        self.open_faults.forget_job(job)
        self.job_series.forget(job)

    def job_state(self, job: str) -> tuple[str, int, str]:
        """(state, ended_ns, reason) of a job, for ``c4 jobs``."""
        return self.lifecycle.state(job, self.live.heard_s_ago(job))

    def status(self) -> c4_pb2.StatusResponse:
        """What the daemon knows; with the store down, everything but the open faults, and
        why the store is down."""
        store_error = self.writer.store_error   # writes failing now: do not wait on it
        open_faults = 0
        if not store_error:
            try:
                open_faults = self.store.count_faults(open_only=True)
            except Exception as exc:
                store_error = str(exc)
        resp = c4_pb2.StatusResponse(
            version=c4.__version__, store=self.config.store.split(":", 1)[0],
            started_ns=self.started_ns, records_ingested=self.live.records_total,
            records_per_second=self.live.rate(), batches_rejected=self.ingest.rejected,
            # jobs known to ingest, not the store's job summaries: those count every stored
            # op, a scan of the whole op table on each status call
            duplicates=self.writer.duplicates, jobs=self.ingest.job_count(),
            open_faults=open_faults, store_error=store_error, live_jobs=self.jobs.live(),
            job_problems=self.live.problem_count(), watches=self.faults.watches.used,
            ingest_streams=self.ingest.streams,
            ingest_authenticated=bool(self.config.tokens_file or self.config.tls_client_ca))
        for info in list(self.ingest.sidecars.values()):
            seen = resp.sidecars.add(sidecar=info.sidecar, host=info.host,
                                     last_seen_ns=info.last_seen_ns)
            if info.stats is not None:
                seen.stats.CopyFrom(info.stats)
        return resp

    def start(self) -> None:
        self.writer.start()
        self._server.start()
        self._analyzer.start()
        self.detail.start()
        self.inspector.start()
        if self.retention is not None:
            self.retention.start(self._stop)
        if self.config.metrics_listen:
            # HTTPS beyond loopback (the daemon's certificate); loopback stays plain HTTP for
            # the local Prometheus agent
            host, _ = parse_listen(self.config.metrics_listen)
            tls = (self.config.tls_cert, self.config.tls_key) \
                if self.config.tls_cert and not is_loopback(f"{host}:0") else None
            self.metrics_server = MetricsServer(self.config.metrics_listen,
                                                self.registry, tls=tls)
        for name in ("", *SERVICES):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("c4 daemon listening on port %d, store %s", self.port, self.config.store)

    def stop(self, grace: float = 5.0) -> None:
        """Stop taking requests, store everything acknowledged or pending, close the store."""
        self._health.enter_graceful_shutdown()
        self._stop.set()
        self.live.close()  # the writer must not wait for detectors that have stopped
        self.detail.close()
        self.inspector.close()
        done = self._server.stop(grace)
        self.ingest.close()
        self.writer.stop()
        done.wait(grace)
        self.hub.close()
        self.store.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.heap.close()
        log.info("c4 daemon stopped")

    def wait(self) -> None:
        while not self._stop.wait(0.5):
            pass


def serve(config: DaemonConfig, *, topology: Topology | None = None,
          on_ready: Callable[[Daemon], None] | None = None, topology_source: str = "") -> None:
    """Run until SIGTERM or SIGINT."""
    daemon = Daemon(config, topology=topology, topology_source=topology_source)
    daemon.start()
    if on_ready is not None:
        on_ready(daemon)
    wait_until(stop_on_signals())
    daemon.stop()
