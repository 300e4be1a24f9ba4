"""A minimal NETLINK_SOCK_DIAG client: dump TCP sockets with their kernel ``struct tcp_info``.

This is what ``ss -tin`` does, without the subprocess and the text parsing: one
``SOCK_DIAG_BY_FAMILY`` dump request per address family asking for the ``INET_DIAG_INFO``
attribute, answered by one ``inet_diag_msg`` per socket (uapi ``linux/inet_diag.h``).
A diag socket only sees the sockets of the network namespace it was created in, so it can be
created inside another namespace (``netns_path``) to watch processes that live there.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
import threading
from collections.abc import Container
from dataclasses import dataclass

from collectors.linkstats.errors import LinkStatsError

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
INET_DIAG_INFO = 2
NLA_TYPE_MASK = 0x3FFF
CLONE_NEWNET = 0x40000000

# Kernel TCP states (include/net/tcp_states.h), indexed by value.
TCP_STATES = (
    "UNKNOWN", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT",
    "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV",
)
TCP_STATE_CODES = {name: code for code, name in enumerate(TCP_STATES)}

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_REQ_V2 = struct.Struct("=BBBxI48x")  # family, protocol, ext, pad, states, zeroed sockid
# family, state, timer, retrans, sport, dport, src, dst, if, cookie, expires, rq, wq, uid, inode
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")
_RTATTR = struct.Struct("=HH")
_INT = struct.Struct("=i")
_BUFSIZE = 65536  # the kernel caps one dump skb at 32 KiB; twice that never truncates


def _align4(n: int) -> int:
    return (n + 3) & ~3


@dataclass(frozen=True)
class DiagRecord:
    """One socket as inet_diag reports it; ``info`` is the raw ``struct tcp_info`` (may be b"")."""

    family: int
    state: int
    src: str
    sport: int
    dst: str
    dport: int
    inode: int
    info: bytes


def format_addr(family: int, raw: bytes) -> str:
    """The textual address; IPv4-mapped IPv6 is shown as IPv4 so both ends of a link agree."""
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    if raw[:12] == b"\0" * 10 + b"\xff\xff":
        return socket.inet_ntop(socket.AF_INET, raw[12:16])
    return socket.inet_ntop(socket.AF_INET6, raw[:16])


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _open_raw() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    sock.settimeout(5.0)
    sock.bind((0, 0))
    return sock


def _open_in_netns(netns_path: str) -> socket.socket:
    """Create the diag socket from a throwaway thread that joined the namespace.

    setns(CLONE_NEWNET) moves only the calling thread, and a socket stays in the namespace it
    was created in, so the rest of the process never leaves its own namespace.
    """
    opened: list[socket.socket] = []
    failed: list[OSError] = []

    def run() -> None:
        try:
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            opened.append(_open_raw())
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, name="c4-linkstats-netns", daemon=True)
    thread.start()
    thread.join()
    if failed:
        exc = failed[0]
        raise LinkStatsError(
            f"cannot open a sock_diag socket in network namespace {netns_path}: {exc} "
            "(joining another namespace needs CAP_SYS_ADMIN: run the sidecar as root or in the "
            "ranks' namespace)"
        ) from exc
    return opened[0]


class DiagSocket:
    """One NETLINK_SOCK_DIAG socket, reused for every dump (opening one per sample is waste)."""

    def __init__(self, netns_path: str | None = None) -> None:
        try:
            self._sock = _open_in_netns(netns_path) if netns_path else _open_raw()
        except OSError as exc:
            raise LinkStatsError(
                f"cannot open a NETLINK_SOCK_DIAG socket: {exc} (is this Linux with "
                "CONFIG_INET_DIAG?)"
            ) from exc
        self._seq = 0
        self._buf = bytearray(_BUFSIZE)

    def close(self) -> None:
        self._sock.close()

    def dump_tcp(
        self, family: int, states_mask: int, inodes: Container[int] | None = None
    ) -> list[DiagRecord]:
        """Every TCP socket of ``family`` in a state of ``states_mask`` (bit ``1 << state``).

        ``inodes`` keeps only those sockets, so foreign sockets are skipped before parsing.
        """
        self._seq += 1
        seq = self._seq
        header = _NLMSGHDR.pack(
            _NLMSGHDR.size + _REQ_V2.size, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0
        )
        request = _REQ_V2.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), states_mask)
        try:
            self._sock.sendto(header + request, (0, 0))
        except OSError as exc:
            raise LinkStatsError(f"sock_diag request failed: {exc}") from exc
        out: list[DiagRecord] = []
        while True:
            try:
                n = self._sock.recv_into(self._buf)
            except TimeoutError as exc:
                raise LinkStatsError("sock_diag dump got no answer within 5 s") from exc
            except OSError as exc:
                raise LinkStatsError(f"sock_diag dump failed: {exc}") from exc
            if self._parse(memoryview(self._buf)[:n], seq, family, inodes, out):
                return out

    @staticmethod
    def _parse(
        buf: memoryview, seq: int, family: int, inodes: Container[int] | None,
        out: list[DiagRecord],
    ) -> bool:
        """Append the records of one datagram; True once the dump is complete."""
        off, end = 0, len(buf)
        hdr_size, msg_size = _NLMSGHDR.size, _DIAG_MSG.size
        while off + hdr_size <= end:
            length, mtype, _flags, mseq, _pid = _NLMSGHDR.unpack_from(buf, off)
            if length < hdr_size or off + length > end:
                raise LinkStatsError(f"sock_diag answer holds a malformed message ({length} B)")
            if mseq != seq:  # left over from an earlier, abandoned dump
                off += _align4(length)
                continue
            if mtype == NLMSG_DONE:
                if length >= hdr_size + 4 and _INT.unpack_from(buf, off + hdr_size)[0] < 0:
                    code = -_INT.unpack_from(buf, off + hdr_size)[0]
                    raise LinkStatsError(f"sock_diag dump aborted: {os.strerror(code)}")
                return True
            if mtype == NLMSG_ERROR:
                code = -_INT.unpack_from(buf, off + hdr_size)[0]
                if code == 0:
                    return True
                if code == errno.ENOENT and family == socket.AF_INET6:
                    return True  # IPv6 disabled in this kernel: no IPv6 sockets to report
                raise LinkStatsError(
                    f"sock_diag refused the dump: {os.strerror(code)} (is the tcp_diag module "
                    "loaded? try `modprobe tcp_diag`)"
                )
            if mtype == SOCK_DIAG_BY_FAMILY and length >= hdr_size + msg_size:
                (fam, state, _timer, _retrans, sport, dport, src, dst, _ifindex, _cookie,
                 _expires, _rq, _wq, _uid, inode) = _DIAG_MSG.unpack_from(buf, off + hdr_size)
                if inodes is None or inode in inodes:
                    info = b""
                    attr, attr_end = off + hdr_size + msg_size, off + length
                    while attr + _RTATTR.size <= attr_end:
                        rta_len, rta_type = _RTATTR.unpack_from(buf, attr)
                        if rta_len < _RTATTR.size:
                            break
                        if rta_type & NLA_TYPE_MASK == INET_DIAG_INFO:
                            info = bytes(buf[attr + _RTATTR.size:attr + rta_len])
                            break
                        attr += _align4(rta_len)
                    out.append(DiagRecord(
                        fam, state, format_addr(fam, src), int.from_bytes(sport, "big"),
                        format_addr(fam, dst), int.from_bytes(dport, "big"), inode, info,
                    ))
            off += _align4(length)
        return False
