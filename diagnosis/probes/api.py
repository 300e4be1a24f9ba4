"""The probe contract: where a probe runs (:class:`ProbeHost`), what one measurement found
(:class:`ProbeResult`), and the :class:`Prober` interface that both the nccl-tests wrapper and
the torch/gloo probe implement, so that probe plans do not care which one measures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from diagnosis.errors import DiagnosisError

#: Operations a prober may be asked for: point-to-point between two hosts, a collective among
#: a group of hosts.
PAIR_OP = "sendrecv"
GROUP_OP = "all_reduce"


class ProbeError(DiagnosisError):
    """A probe could not be run at all (a missing binary, a bad host list): not a measurement.

    A probe that ran and failed (timed out, exited non-zero, measured nothing) is not an
    error: it is a :class:`ProbeResult` with ``ok`` false, and counts as evidence."""


@dataclass(frozen=True)
class ProbeHost:
    """One host a probe runs on.

    ``addr`` is where its peers reach it; ``prefix`` is put before the worker's command line
    (``("ip", "netns", "exec", "c4l-node000")`` in the lab, ``("ssh", "node7")`` on a
    cluster, empty to run on this machine); ``env`` adds variables (``GLOO_SOCKET_IFNAME``).
    ``ranks`` is how many processes to run there (GPUs per host for nccl-tests)."""

    id: str
    addr: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    ranks: int = 1


@dataclass(frozen=True)
class ProbeResult:
    """One measurement among ``hosts``. Bandwidths in GB/s (10^9 bytes/s) as nccl-tests
    reports them: ``busbw`` is ``algbw`` scaled by the collective's traffic factor, so that
    it compares with link speed whatever the group size."""

    op: str
    hosts: tuple[str, ...]
    backend: str
    ok: bool
    size_bytes: int = 0
    algbw_GBps: float = 0.0
    busbw_GBps: float = 0.0
    seconds: float = 0.0  # wall time of the whole probe, start-up included
    error: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "hosts": list(self.hosts), "backend": self.backend,
                "ok": self.ok, "size_bytes": self.size_bytes,
                "algbw_GBps": round(self.algbw_GBps, 6), "busbw_GBps": round(self.busbw_GBps, 6),
                "seconds": round(self.seconds, 3), "error": self.error, "detail": self.detail}


class Prober(Protocol):
    """Runs one probe among hosts; never raises for a probe that ran and failed."""

    name: str

    def pair(self, a: ProbeHost, b: ProbeHost) -> ProbeResult:
        """Point-to-point bandwidth between two hosts (both directions at once)."""
        ...

    def group(self, hosts: list[ProbeHost]) -> ProbeResult:
        """A collective (all-reduce) among the hosts."""
        ...


def bus_factor(op: str, ranks: int) -> float:
    """busbw / algbw for an operation among ``ranks`` ranks (nccl-tests' PERFORMANCE.md)."""
    if ranks < 2:
        return 1.0
    if op in ("all_reduce", "all_reduce_perf"):
        return 2.0 * (ranks - 1) / ranks
    if op in ("all_gather", "reduce_scatter", "alltoall", "all_gather_perf",
              "reduce_scatter_perf", "alltoall_perf"):
        return (ranks - 1) / ranks
    return 1.0
