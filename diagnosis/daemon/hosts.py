"""The hosts' internals as their sidecars discovered them (``HostTopology`` requests): checked,
kept in the store (newest per host), and handed to the live view, which assembles each job's
topology from them (``c4.topology.job``)."""

from __future__ import annotations

import json
import logging
import threading

import grpc

from c4.proto import c4_pb2
from c4.topology.host_internals import HostInternals
from diagnosis.daemon.decode import Rejected
from diagnosis.store import HostRecord, Store

log = logging.getLogger(__name__)

# Larger internals than any real host's (a few kB for 8 GPUs and 12 NICs) are refused: the
# daemon keeps every host's in memory.
MAX_INTERNALS_BYTES = 1 << 20


class HostBook:
    def __init__(self, store: Store | None = None) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._hosts: dict[str, HostInternals] = {}
        self._t_ns: dict[str, int] = {}
        self.generation = 0     # bumped by every change: the live view reassembles then
        if store is not None:
            for rec in store.hosts():
                try:
                    hi = parse_internals(rec.internals, rec.host)
                except Rejected as exc:
                    log.warning("stored internals of host %s are unreadable, ignored until its "
                                "sidecar sends them again: %s", rec.host, exc.message)
                    continue
                self._hosts[rec.host], self._t_ns[rec.host] = hi, rec.t_ns
            self.generation = len(self._hosts)

    def put(self, msg: c4_pb2.HostTopology, sidecar: str = "") -> bool:
        """Keep ``msg`` unless it is older than what is kept; True when it changed anything.
        Raises :class:`Rejected` on a malformed one (resending it will not help)."""
        if not msg.host:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "HostTopology.host is empty")
        if len(msg.internals) > MAX_INTERNALS_BYTES:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                           f"HostTopology of {msg.host} holds {len(msg.internals)} bytes; the "
                           f"daemon takes at most {MAX_INTERNALS_BYTES}")
        hi = parse_internals(msg.internals, msg.host)
        with self._lock:
            if msg.t_ns < self._t_ns.get(msg.host, -1):
                return False    # a resend of an older discovery, overtaken
            if self._store is not None:
                self._store.put_host(HostRecord(msg.host, msg.t_ns, msg.internals, msg.digest,
                                                sidecar))
            self._hosts[msg.host], self._t_ns[msg.host] = hi, msg.t_ns
            self.generation += 1
        log.info("host %s: %d GPUs, %d NICs (from sidecar %s)", msg.host, len(hi.gpus),
                 len(hi.nics), sidecar or "?")
        return True

    def internals(self) -> dict[str, HostInternals]:
        with self._lock:
            return dict(self._hosts)

    def __len__(self) -> int:
        with self._lock:
            return len(self._hosts)


def parse_internals(text: str, host: str) -> HostInternals:
    """The internals JSON of a ``HostTopology``, checked against the host it names."""
    try:
        hi = HostInternals.from_json(json.loads(text))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                       f"HostTopology.internals of {host} is not the JSON of c4 topology "
                       f"discover ({exc!r})") from None
    if hi.host != host:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                       f"HostTopology.host is {host!r} but its internals describe {hi.host!r}")
    return hi
