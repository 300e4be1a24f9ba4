"""The ``/metrics`` endpoint every c4 service serves (the daemon, each node sidecar), and the
helpers its collectors build metric families with.

Each service builds its own ``CollectorRegistry`` (tests run several in one process) and hands
it to :class:`MetricsServer`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

log = logging.getLogger(__name__)


def parse_listen(listen: str) -> tuple[str, int]:
    """``PORT`` (loopback) or ``HOST:PORT``."""
    host, _, port = listen.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"metrics address {listen!r} needs PORT or HOST:PORT") from None
    return (host.strip("[]") or "127.0.0.1"), number


class MetricsServer:
    """An HTTP ``/metrics`` endpoint for one registry; HTTPS with ``tls`` (certificate, key).
    The daemon allows plaintext beyond loopback only when told (``check_metrics_listen``)."""

    def __init__(self, listen: str, registry: CollectorRegistry, *,
                 tls: tuple[str, str] | None = None) -> None:
        host, port = parse_listen(listen)
        self.registry = registry
        certfile, keyfile = tls if tls is not None else (None, None)
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry,
                                                      certfile=certfile, keyfile=keyfile)
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self.scheme = "https" if tls is not None else "http"
        log.info("metrics on %s://%s:%d/metrics", self.scheme, host, self.port)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def labelled(kind: type, name: str, doc: str, label: str,
             values: Sequence[tuple[str, float]]) -> Metric:
    family = kind(name, doc, labels=[label])
    for key, value in values:
        family.add_metric([key], value)
    return family
