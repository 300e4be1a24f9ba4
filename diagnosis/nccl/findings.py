"""What logs and text RAS reports say outright, as fault reports: the facts the engine cannot
see in timing.

* an IB completion error (``NET/IB : Got completion from peer … with error 12``): the transport
  gave up on the path between the rank's NIC and the peer (``error``; the NIC named by the
  line's ``hca``, or the rank's, then the peer's host);
* a refused or failed socket connect: the peer's process is gone (``error``, the peer's host);
* PyTorch's desync report (``TORCH_NCCL_DESYNC_DEBUG``): the ranks it names as lagging, dead or
  mismatched (``noncomm_hang``);
* processes a RAS report or a monitor event calls dead, or whose data is missing
  (``error``); JSON reports reach the engine as records instead (:mod:`ras_progress`).

:func:`merge` adds a finding only where no engine report already names its culprit.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from c4.report import FaultReport, Suspect
from c4.topology.protocol import TopologyLike
from diagnosis.nccl.job import Resolved
from diagnosis.nccl.logs import NcclWarn, WatchdogTimeout, Where
from diagnosis.nccl.sources import NcclSources

log = logging.getLogger(__name__)

__all__ = ["findings", "merge"]

_WC_HINT = {12: "the transport retry counter was exceeded: the path to the peer (cable, "
                "switch port) or the peer's NIC stopped answering",
            13: "the receiver-not-ready retries were exceeded: the peer stopped posting",
            5: "the queue pair was flushed after an earlier error",
            10: "the peer refused remote access (a registration or protection mismatch)",
            4: "a local protection error (memory registration)"}


def findings(sources: NcclSources, resolved: Resolved, topology: TopologyLike | None,
             engine: Any) -> list[FaultReport]:
    """Reports for what the logs and the text RAS reports state."""
    now = int(getattr(engine, "now_ns", 0) or 0)
    namer = _Namer(resolved, topology, engine)
    out: list[FaultReport] = []
    for w in sources.logs.warns:
        if w.kind == "ib_completion":
            out.append(_ib(w, namer, now))
        elif w.kind == "socket_connect":
            out.append(_connect(w, namer, now))
    out += _desyncs(sources, namer, now)
    out += _dead(sources, namer, now)
    if sources.logs.timeouts and not any(r.kind == "noncomm_hang" for r in out):
        t: WatchdogTimeout = sources.logs.timeouts[0]
        log.info("%d watchdog timeouts (first: %s #%d after %d ms, %s): these name the ranks "
                 "that waited, not the one they waited for; the Inspector's records or "
                 "TORCH_NCCL_DESYNC_DEBUG=1 name it", len(sources.logs.timeouts), t.op, t.seq,
                 t.ran_ms, t.where.source)
    return out


def merge(reports: list[FaultReport], extra: list[FaultReport]) -> list[FaultReport]:
    """The engine's reports, and the findings whose culprit none of them names."""
    named: set[tuple[str, int | str | None]] = {
        (r.kind, s.rank if s.rank is not None else s.id) for r in reports for s in r.suspects[:1]}
    out = list(reports)
    for f in extra:
        top = f.suspects[0] if f.suspects else None
        key = (f.kind, top.rank if top is not None and top.rank is not None else
               (top.id if top is not None else None))
        if key in named:
            continue
        named.add(key)
        out.append(f)
    return out


class _Namer:
    """Suspects for ranks, hosts and NICs, on the topology where there is one."""

    def __init__(self, resolved: Resolved, topology: TopologyLike | None, engine: Any) -> None:
        self.r, self.topo, self.engine = resolved, topology, engine

    def rank(self, host: str | None, pid: int | None) -> int | None:
        if host is None or pid is None:
            return None
        return self.r.rank(host, pid)

    def of_rank(self, rank: int, score: float) -> Suspect:
        place = self.engine.placement.get(rank) if self.engine is not None else None
        if place is not None and place.gpu:
            return Suspect("gpu", place.gpu, score, rank=rank)
        return Suspect("rank", str(rank), score, rank=rank)

    def host(self, addr: str | None) -> str | None:
        if addr is None:
            return None
        name = self.r.aliases.get(addr, addr)
        if self.topo is not None:
            short = {h.split(".")[0].lower(): h for h in self.topo.hosts()}
            return short.get(name.split(".")[0].lower(), name)
        return name

    def nic(self, host: str | None, device: str | None, rank: int | None) -> str | None:
        if self.topo is None:
            return None
        if host is not None and device is not None:
            h = self.host(host) or host
            if f"{h}/{device}" in set(self.topo.nics(h)):
                return f"{h}/{device}"
        if rank is not None and self.engine is not None:
            return self.engine.placement.get(rank).nic
        return None


def _when(w: Where, default: int) -> int:
    if w.stamp and len(w.stamp) >= 19 and w.stamp[4] == "-":
        try:
            return int(time.mktime(time.strptime(w.stamp[:19].replace("T", " "),
                                                 "%Y-%m-%d %H:%M:%S")) * 1e9)
        except ValueError:
            pass
    return default


def _who(w: Where) -> str:
    return f"{w.host} pid {w.pid}" + (f" GPU {w.cuda_dev}" if w.cuda_dev is not None else "")


def _ib(w: NcclWarn, namer: _Namer, now: int) -> FaultReport:
    rank = namer.rank(w.where.host, w.where.pid)
    peer_host = namer.host(w.peer_addr)
    nic = namer.nic(w.where.host, w.hca, rank)
    suspects: list[Suspect] = []
    if nic is not None:
        suspects.append(Suspect("nic", nic, 0.6, rank=rank))
    elif rank is not None:
        suspects.append(namer.of_rank(rank, 0.6))
    if peer_host is not None:
        suspects.append(Suspect("host", peer_host, 0.4))
    status = f"{w.status_name or '?'} ({w.status})" if w.status is not None else "an error"
    who = f"rank {rank} ({_who(w.where)})" if rank is not None else _who(w.where)
    hint = _WC_HINT.get(w.status or -1, "the transport failed")
    summary = (f"{who} got an IB completion error {status} from peer {w.peer_addr}"
               f"{f' ({peer_host})' if peer_host and peer_host != w.peer_addr else ''}"
               f"{f' on {w.hca}' if w.hca else ''}: {hint}")
    return FaultReport("error", tuple(suspects), _when(w.where, now), summary,
                       evidence={"log": f"{w.where.source}:{w.where.line}", "line": w.message,
                                 "status": w.status, "vendor_err": w.vendor_err,
                                 "direction": w.direction, "peer": w.peer_addr})


def _connect(w: NcclWarn, namer: _Namer, now: int) -> FaultReport:
    rank = namer.rank(w.where.host, w.where.pid)
    peer_host = namer.host(w.peer_addr)
    suspects = [Suspect("host", peer_host, 0.6)] if peer_host else []
    if rank is not None:
        suspects.append(namer.of_rank(rank, 0.2))
    who = f"rank {rank} ({_who(w.where)})" if rank is not None else _who(w.where)
    summary = (f"{who} could not connect to {w.peer_addr}<{w.peer_port}> "
               f"({w.status_name}): the process there is gone or its host unreachable")
    return FaultReport("error", tuple(suspects), _when(w.where, now), summary,
                       evidence={"log": f"{w.where.source}:{w.where.line}", "line": w.message})


def _desyncs(sources: NcclSources, namer: _Namer, now: int) -> list[FaultReport]:
    out = []
    for d in sources.logs.desyncs:
        if not d.culprits:
            continue
        # the ranks a desync report names are ranks of its process group; for the default
        # group (the usual one) they are the global ranks
        suspects = tuple(namer.of_rank(r, 0.9) for r, _ in d.culprits)
        what = "; ".join(f"rank {r} {why}" for r, why in d.culprits)
        out.append(FaultReport(
            "noncomm_hang", suspects, _when(d.where, now),
            f"PyTorch's desync report: rank {d.pg_rank} timed out in {d.op} #{d.seq} (counted "
            f"from 1); {what}", seq=d.seq - 1,
            evidence={"log": f"{d.where.source}:{d.where.line}",
                      "culprits": [list(c) for c in d.culprits]}))
    return out


def _dead(sources: NcclSources, namer: _Namer, now: int) -> list[FaultReport]:
    out = []
    seen: set[tuple[int, str]] = set()

    def report(pid: int, node: str, gpus: tuple[int, ...], why: str, t: int, where: str) -> None:
        if (pid, node) in seen:
            return
        seen.add((pid, node))
        rank = namer.rank(node, pid)
        suspects = (namer.of_rank(rank, 0.9),) if rank is not None else \
            (Suspect("host", namer.host(node) or node, 0.9),)
        who = f"rank {rank} (process {pid} on {node})" if rank is not None else \
            f"process {pid} on {node}"
        gpu = f", GPU {', '.join(map(str, gpus))}" if gpus else ""
        out.append(FaultReport("error", suspects, t, f"{who}{gpu} {why}",
                               evidence={"source": where}))

    for s in sources.ras:
        if s.format != "text":
            continue
        t = int(s.t_ns or now)
        for p in s.dead:
            report(p.pid, p.node, p.gpus, "is considered dead by NCCL RAS (unreachable over "
                   "its network)", t, f"{s.source}:{s.line}")
        for p in s.incomplete:
            report(p.pid, p.node, p.gpus, "sent NCCL RAS no communicator data (stopped or "
                   "unreachable)", t, f"{s.source}:{s.line}")
    for e in sources.events:
        if e.event in ("PEER_DEAD", "PEER_TIMEOUT_DEAD") and e.pid is not None and e.host:
            report(e.pid, e.host, e.gpus, f"was declared dead by NCCL RAS ({e.event})",
                   int(e.t_ns or now), f"{e.source}:{e.line}")
    return out
