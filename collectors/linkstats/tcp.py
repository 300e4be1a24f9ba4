"""Kernel TCP_INFO of the TCP sockets that given processes own, through netlink sock_diag.

A socket is tied to a process by its inode: ``/proc/<pid>/fd/<n>`` links to ``socket:[<inode>]``
and inet_diag reports the same inode for each socket. Processes in another network namespace
(containers, test namespaces) are sampled through a diag socket opened inside their namespace,
which needs CAP_SYS_ADMIN; without it those processes are skipped with a warning.

Older kernels return a shorter ``struct tcp_info``; fields beyond its end read as 0
(``bytes_acked``/``bytes_received`` arrived in Linux 4.1, ``delivery_rate`` in 4.9).
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from c4.proto.codec import CONN_COLUMNS, Columns, empty_columns
from collectors.linkstats._netlink import TCP_STATE_CODES, TCP_STATES, DiagRecord, DiagSocket
from collectors.linkstats.errors import LinkStatsError

log = logging.getLogger(__name__)

# The struct tcp_info fields we keep (uapi linux/tcp.h, native byte order):
# tcpi_rtt @68 (us), tcpi_total_retrans @100 (segments), tcpi_bytes_acked @120,
# tcpi_bytes_received @128, tcpi_delivery_rate @160 (bytes/s), tcpi_busy_time @168 (us).
_TCP_INFO = struct.Struct("=68xI28xI16xQQ24xQQ")
_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_SOCKET_LINK = "socket:["


@dataclass(frozen=True)
class SocketSample:
    """One TCP socket of one process at one instant; byte and retransmit counts are cumulative."""

    pid: int  # owning process; 0 when no scanned process holds the socket
    inode: int
    local: str  # "ip:port", IPv6 as "[addr]:port"
    remote: str
    t_ns: int  # wall clock, ns
    bytes_acked: int
    bytes_received: int
    rtt_us: int  # smoothed RTT
    delivery_rate: int  # bytes per second, the kernel's latest delivery-rate estimate
    retrans: int  # total retransmitted segments
    state: str  # kernel state name, e.g. "ESTABLISHED"
    busy_us: int = 0  # time with data in flight (Linux 4.10+; 0 on older kernels)


def parse_tcp_info(info: bytes) -> tuple[int, int, int, int, int, int]:
    """(rtt_us, retrans, bytes_acked, bytes_received, delivery_rate, busy_us) from a raw
    tcp_info.

    A struct shorter than ours (older kernel, or no INET_DIAG_INFO at all) reads missing fields
    as 0; a longer one (newer kernel) has its extra fields ignored.
    """
    if len(info) < _TCP_INFO.size:
        info = info + bytes(_TCP_INFO.size - len(info))
    return _TCP_INFO.unpack_from(info)


def endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def socket_inodes(pid: int, proc_root: str = "/proc") -> list[int]:
    """Inodes of the sockets ``pid`` holds open; [] when the process is gone or unreadable."""
    out: list[int] = []
    try:
        with os.scandir(f"{proc_root}/{pid}/fd") as entries:
            for entry in entries:
                try:
                    target = os.readlink(entry.path)
                except OSError:  # fd closed while we looked
                    continue
                if target.startswith(_SOCKET_LINK):
                    out.append(int(target[len(_SOCKET_LINK):-1]))
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        pass
    except PermissionError:
        log.warning("cannot read %s/%s/fd: run the sampler as the ranks' user or root",
                    proc_root, pid)
    return out


def _all_pids(proc_root: str) -> list[int]:
    return [int(name) for name in os.listdir(proc_root) if name.isdigit()]


def _netns_id(proc_root: str, pid: int | str) -> int | None:
    try:
        return os.stat(f"{proc_root}/{pid}/ns/net").st_ino
    except OSError:
        return None


class TcpSampler:
    """Samples TCP_INFO repeatedly, keeping one diag socket per network namespace open.

    Not thread-safe: one sampler per sampling loop.
    """

    def __init__(
        self,
        *,
        proc_root: str = "/proc",
        states: Iterable[str] = ("ESTABLISHED",),
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        try:
            self._states_mask = sum(1 << TCP_STATE_CODES[name] for name in states)
        except KeyError as exc:
            raise ValueError(f"unknown TCP state {exc}; known: {', '.join(TCP_STATES)}") from None
        self.proc_root = proc_root
        self._clock = clock
        self._own_ns = _netns_id(proc_root, "self")
        self._diag: dict[int | None, DiagSocket] = {}
        self._unreachable: set[int] = set()  # namespaces we failed to join; warned once
        # The fd scan is cached: pid -> its socket inodes and network namespace at last scan,
        # and per namespace the sockets known to belong to none of our processes.
        self._inodes: dict[int, list[int]] = {}
        self._ns_of: dict[int, int | None] = {}
        self._foreign: dict[int | None, set[int]] = {}

    def close(self) -> None:
        for diag in self._diag.values():
            diag.close()
        self._diag.clear()

    def __enter__(self) -> TcpSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _diag_for(self, ns: int | None, pids: Sequence[int]) -> DiagSocket | None:
        key = None if ns == self._own_ns else ns
        if key in self._diag:
            return self._diag[key]
        if key is None:
            diag = DiagSocket()
        else:
            # Enter the namespace through any member: one may have exited since its scan.
            for pid in pids:
                try:
                    diag = DiagSocket(f"{self.proc_root}/{pid}/ns/net")
                    break
                except LinkStatsError as exc:
                    error = exc
            else:
                if key not in self._unreachable:  # retried every sample, reported once
                    self._unreachable.add(key)
                    log.warning("skipping the sockets of pids %s: %s", list(pids), error)
                return None
        self._diag[key] = diag
        return diag

    def sample(self, pids: Iterable[int] | None = None) -> list[SocketSample]:
        """Sockets (in the sampler's states) owned by ``pids``; ``None``: every socket of this
        network namespace, with ``pid`` 0 where no process could be found for it."""
        if pids is None:
            owners = {ino: pid for pid in _all_pids(self.proc_root)
                      for ino in socket_inodes(pid, self.proc_root)}
            diag = self._diag_for(self._own_ns, ())
            assert diag is not None  # our own namespace needs no setns
            return self._dump(diag, owners, None)
        pids = list(dict.fromkeys(pids))
        wanted = set(pids)
        for gone in [p for p in self._inodes if p not in wanted]:
            del self._inodes[gone], self._ns_of[gone]
        fresh: set[int] = set()
        for pid in pids:
            if pid not in self._inodes:
                fresh.add(pid)
                self._scan(pid)
        # One diag socket sees one network namespace: group the processes by theirs.
        groups: dict[int | None, list[int]] = {}
        for pid in pids:
            if pid in self._inodes:
                groups.setdefault(self._ns_of[pid], []).append(pid)
        out: list[SocketSample] = []
        used: set[int | None] = set()
        for ns, members in groups.items():
            diag = self._diag_for(ns, members)
            if diag is None:
                continue
            key = None if ns == self._own_ns else ns
            used.add(key)
            out.extend(self._sample_group(diag, key, members, fresh))
        # A namespace none of our processes uses any more: let it go rather than pin it.
        for key in [k for k in self._diag if k is not None and k not in used]:
            self._diag.pop(key).close()
            self._foreign.pop(key, None)
        return out

    def _scan(self, pid: int) -> None:
        inodes = socket_inodes(pid, self.proc_root)
        if inodes:
            self._inodes[pid] = inodes
            self._ns_of[pid] = _netns_id(self.proc_root, pid)
        else:  # no sockets yet (or gone): looked at afresh next time
            self._inodes.pop(pid, None)
            self._ns_of.pop(pid, None)

    def _owners(self, members: Iterable[int]) -> dict[int, int]:
        owners: dict[int, int] = {}
        for pid in members:
            for ino in self._inodes.get(pid, ()):
                owners.setdefault(ino, pid)
        return owners

    def _sample_group(
        self, diag: DiagSocket, key: int | None, members: list[int], fresh: set[int]
    ) -> list[SocketSample]:
        """Dump one namespace, rescanning the members' fds only when a socket shows up that
        no earlier scan has seen: reading every fd link every second costs more than the dump."""
        owners = self._owners(members)
        watch = _Watch(owners, self._foreign.get(key, set()))
        out = self._dump(diag, owners, watch)
        if watch.unknown and not fresh.issuperset(members):
            for pid in members:
                if pid not in fresh:
                    self._scan(pid)
            owners = self._owners(members)
            if not watch.unknown.isdisjoint(owners):
                watch = _Watch(owners, set())
                out = self._dump(diag, owners, watch)
        self._foreign[key] = watch.seen.difference(owners)
        return out

    def _dump(
        self, diag: DiagSocket, owners: Mapping[int, int], only: Container[int] | None
    ) -> list[SocketSample]:
        out: list[SocketSample] = []
        for family in _FAMILIES:
            records = diag.dump_tcp(family, self._states_mask, only)
            t_ns = self._clock()
            out.extend(_to_sample(rec, owners.get(rec.inode, 0), t_ns) for rec in records)
        return out


class _Watch:
    """The dump filter: keeps our sockets, remembers every inode seen and those never seen."""

    __slots__ = ("foreign", "owners", "seen", "unknown")

    def __init__(self, owners: Mapping[int, int], foreign: set[int]) -> None:
        self.owners, self.foreign = owners, foreign
        self.seen: set[int] = set()
        self.unknown: set[int] = set()

    def __contains__(self, inode: object) -> bool:
        self.seen.add(inode)  # type: ignore[arg-type]
        if inode in self.owners:
            return True
        if inode not in self.foreign:
            self.unknown.add(inode)  # type: ignore[arg-type]
        return False


def _to_sample(rec: DiagRecord, pid: int, t_ns: int) -> SocketSample:
    rtt, retrans, acked, received, rate, busy = parse_tcp_info(rec.info)
    state = TCP_STATES[rec.state] if rec.state < len(TCP_STATES) else str(rec.state)
    return SocketSample(
        pid, rec.inode, endpoint(rec.src, rec.sport), endpoint(rec.dst, rec.dport), t_ns,
        acked, received, rtt, rate, retrans, state, busy,
    )


def sample_tcp(
    pids: Iterable[int] | None = None, *, proc_root: str = "/proc"
) -> list[SocketSample]:
    """Established TCP sockets owned by ``pids`` (``None``: all of this namespace), sampled once.

    Raises:
        LinkStatsError: the kernel has no sock_diag, or refused the dump.
    """
    with TcpSampler(proc_root=proc_root) as sampler:
        return sampler.sample(pids)


def to_columns(samples: Sequence[SocketSample], rank_of_pid: Mapping[int, int]) -> Columns:
    """CONN_COLUMNS for the samples whose pid is a known rank (the others are dropped);
    ``local``/``remote`` index a string table of endpoints."""
    rows = [s for s in samples if s.pid in rank_of_pid]
    if not rows:
        return empty_columns(CONN_COLUMNS)
    table: dict[str, int] = {}
    local = [table.setdefault(s.local, len(table)) for s in rows]
    remote = [table.setdefault(s.remote, len(table)) for s in rows]
    values = {
        "rank": [rank_of_pid[s.pid] for s in rows],
        "local": local,
        "remote": remote,
        "t_ns": [s.t_ns for s in rows],
        "bytes_acked": [s.bytes_acked for s in rows],
        "bytes_received": [s.bytes_received for s in rows],
        "rtt_us": [s.rtt_us for s in rows],
        "delivery_rate": [s.delivery_rate for s in rows],
        "retrans": [s.retrans for s in rows],
        "busy_us": [s.busy_us for s in rows],
    }
    return Columns({name: np.asarray(values[name], dtype=dt) for name, dt in CONN_COLUMNS.items()},
                   list(table))
