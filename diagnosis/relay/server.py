"""The relay process: its gRPC server for the sidecars and its links to the daemon."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from c4.processes import stop_on_signals, wait_until
from c4.proto import c4_pb2_grpc
from c4.security.channel import ClientSecurity
from c4.security.server import AuthInterceptor, ServerTls, add_port, check_listen
from c4.security.tokens import TokenTable
from diagnosis.daemon.decoding import SafeDecode
from diagnosis.errors import DiagnosisError
from diagnosis.relay.config import RelayConfig
from diagnosis.relay.service import RelayService
from diagnosis.relay.upstream import Upstream

log = logging.getLogger(__name__)


class Relay:
    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        tls = ServerTls(config.tls_cert, config.tls_key, config.tls_client_ca or None) \
            if config.tls_cert else None
        check_listen(config.listen, tls=tls is not None, insecure=config.insecure)
        self.tokens = TokenTable.load(config.tokens_file or None)
        self._stop = threading.Event()
        self.service = RelayService(config.max_streams, self._stop)
        security = ClientSecurity.from_env(tls_ca=config.daemon_tls_ca,
                                           tls_cert=config.daemon_tls_cert,
                                           tls_key=config.daemon_tls_key, token=config.token)
        sizes = [("grpc.max_receive_message_length", config.max_message_bytes),
                 ("grpc.max_send_message_length", config.max_message_bytes)]
        self.service.links = [
            Upstream(i, config.daemon, on_ack=self.service.on_ack,
                     on_control=self.service.on_control, on_lost=self.service.on_lost,
                     queue_max=config.queue_requests, reconnect_max_s=config.reconnect_max_s,
                     security=security,
                     # one channel (connection) per link: gRPC would otherwise share one
                     # connection among equal channels
                     options=[*sizes, ("grpc.use_local_subchannel_pool", 1)])
            for i in range(config.upstreams)]
        interceptors: list[grpc.ServerInterceptor] = [SafeDecode()]
        if self.tokens:
            interceptors.append(AuthInterceptor(self.tokens))
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.workers,
                                       thread_name_prefix="c4-relay-rpc"),
            interceptors=interceptors, maximum_concurrent_rpcs=config.workers,
            options=[("grpc.so_reuseport", 0), *sizes])
        c4_pb2_grpc.add_IngestServicer_to_server(self.service, self._server)
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        self.port = add_port(self._server, config.listen, tls)
        if self.port == 0:
            raise DiagnosisError(f"cannot listen on {config.listen}: the address is in use or "
                                 "not this machine's; pick another --listen")
        self._threads = [threading.Thread(target=link.run, args=(self._stop,),
                                          name=f"c4-relay-up{link.index}", daemon=True)
                         for link in self.service.links]

    def start(self) -> None:
        for t in self._threads:
            t.start()
        self._server.start()
        self._health.set("", health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop taking streams; the sidecars resend what the daemon has not acknowledged to
        whichever relay or daemon they reach next."""
        self._health.enter_graceful_shutdown()
        self._stop.set()
        self._server.stop(grace_s).wait()
        for t in self._threads:
            t.join(timeout=self.config.reconnect_max_s + 1)


def serve(config: RelayConfig, on_ready: Callable[[Relay], None] | None = None) -> None:
    """Run until SIGTERM or SIGINT."""
    relay = Relay(config)
    relay.start()
    if on_ready is not None:
        on_ready(relay)
    wait_until(stop_on_signals())
    relay.stop()
