"""TCP_INFO sampling on real loopback connections between this process and a child process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from c4.proto import codec
from collectors.linkstats import LinkSampler, concat_columns
from collectors.linkstats.tcp import (
    SocketSample,
    TcpSampler,
    parse_tcp_info,
    sample_tcp,
    to_columns,
)

pytestmark = pytest.mark.network

# The child listens, accepts one connection, sends SEND bytes, reads RECV bytes, reports "done"
# and holds the socket open until its stdin closes.
CHILD = r"""
import socket, sys
host, send, recv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
srv = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.sendall(b"c" * send)
got = 0
while got < recv:
    chunk = conn.recv(1 << 16)
    if not chunk:
        sys.exit("peer closed early")
    got += len(chunk)
print("done", flush=True)
sys.stdin.read()
"""

CHILD_SENDS = 3_000_000
PARENT_SENDS = 1_234_567


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@dataclass
class Link:
    child: subprocess.Popen
    sock: socket.socket  # the parent's end

    @property
    def inode(self) -> int:
        return os.fstat(self.sock.fileno()).st_ino

    def local(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def remote(self) -> str:
        host, port = self.sock.getpeername()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _open_link(host: str) -> Iterator[Link]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, host, str(CHILD_SENDS), str(PARENT_SENDS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        port = int(child.stdout.readline())
        sock = socket.create_connection((host, port), timeout=10)
        got = 0
        while got < CHILD_SENDS:
            got += len(sock.recv(1 << 16))
        sock.sendall(b"p" * PARENT_SENDS)
        assert child.stdout.readline().strip() == "done"
        yield Link(child, sock)
        sock.close()
    finally:
        child.stdin.close()
        child.wait(timeout=10)


@pytest.fixture(params=["127.0.0.1", "::1"])
def link(request) -> Iterator[Link]:
    if request.param == "::1" and not _ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    yield from _open_link(request.param)


@pytest.fixture
def link4() -> Iterator[Link]:
    yield from _open_link("127.0.0.1")


def poll(fn: Callable[[], list[SocketSample]], ok: Callable[[list[SocketSample]], bool],
         timeout: float = 10.0) -> list[SocketSample]:
    """Sample until ``ok`` holds: the last ACKs may still be in flight when the data is read."""
    deadline = time.monotonic() + timeout
    while True:
        out = fn()
        if ok(out) or time.monotonic() > deadline:
            return out
        time.sleep(0.02)


def test_child_socket_counters_and_endpoints(link: Link) -> None:
    pid = link.child.pid
    child = poll(lambda: sample_tcp([pid]),
                 lambda s: len(s) == 1 and s[0].bytes_acked >= CHILD_SENDS)
    assert len(child) == 1, child  # the listening socket is not established: not reported
    c = child[0]
    assert c.pid == pid
    assert c.state == "ESTABLISHED"
    # bytes_acked counts the SYN on some kernels, hence the +1.
    assert CHILD_SENDS <= c.bytes_acked <= CHILD_SENDS + 1
    assert c.bytes_received == PARENT_SENDS
    assert c.rtt_us > 0
    assert c.delivery_rate > 0
    # A loaded machine may retransmit even on loopback (tail-loss probes): the counter is read,
    # not promised to be zero.
    assert 0 <= c.retrans < 1000
    # The child's end is the mirror image of ours.
    assert c.local == link.remote()
    assert c.remote == link.local()
    assert c.inode != link.inode

    mine = poll(lambda: sample_tcp([os.getpid()]),
                lambda s: any(x.inode == link.inode and x.bytes_acked >= PARENT_SENDS for x in s))
    ours = [s for s in mine if s.inode == link.inode]
    assert len(ours) == 1
    assert ours[0].local == c.remote and ours[0].remote == c.local
    assert PARENT_SENDS <= ours[0].bytes_acked <= PARENT_SENDS + 1
    assert ours[0].bytes_received == CHILD_SENDS
    assert ours[0].pid == os.getpid()


def test_other_pids_sockets_are_not_reported(link4: Link) -> None:
    child_only = sample_tcp([link4.child.pid])
    assert [s.pid for s in child_only] == [link4.child.pid]
    assert link4.inode not in {s.inode for s in child_only}
    mine = sample_tcp([os.getpid()])
    assert link4.inode in {s.inode for s in mine}
    assert all(s.pid == os.getpid() for s in mine)
    assert sample_tcp([]) == []
    # A pid that does not exist is no error, it simply has no sockets.
    assert sample_tcp([2**22 + 12345]) == []
    # None: every established socket of the namespace, owners found by scanning /proc.
    everything = {s.inode: s.pid for s in sample_tcp()}
    assert everything[link4.inode] == os.getpid()
    assert everything[child_only[0].inode] == link4.child.pid


def test_sampler_notices_sockets_opened_and_closed_between_samples(link4: Link) -> None:
    # The sampler caches which sockets each process holds; a new one must still show up.
    me, child = os.getpid(), link4.child.pid
    with TcpSampler() as sampler:
        first = {s.inode for s in sampler.sample([me])}
        assert link4.inode in first
        srv = socket.create_server(("127.0.0.1", 0))
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
        new = {os.fstat(a.fileno()).st_ino, os.fstat(b.fileno()).st_ino}
        second = sampler.sample([me])
        assert new <= {s.inode for s in second}
        assert all(s.pid == me for s in second)
        a.close()
        b.close()
        srv.close()
        third = poll(lambda: sampler.sample([me]),
                     lambda out: new.isdisjoint(s.inode for s in out))
        assert new.isdisjoint(s.inode for s in third)  # no longer established
        assert link4.inode in {s.inode for s in third}
        # A pid added later is scanned afresh; the child's socket was foreign until now.
        both = sampler.sample([me, child])
        assert {s.pid for s in both} == {me, child}


def test_ipv4_mapped_ipv6_endpoints_read_as_ipv4() -> None:
    # A dual-stack listener's accepted IPv4 connection is an AF_INET6 socket holding
    # ::ffff:127.0.0.1; both ends must name the same endpoints for the daemon to pair them.
    if not _ipv6_loopback():
        pytest.skip("this machine has no IPv6")
    with socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True) as srv:
        client = socket.create_connection(("127.0.0.1", srv.getsockname()[1]))
        server, _ = srv.accept()
        with client, server:
            assert server.family == socket.AF_INET6
            by_inode = {s.inode: s for s in sample_tcp([os.getpid()])}
            c = by_inode[os.fstat(client.fileno()).st_ino]
            a = by_inode[os.fstat(server.fileno()).st_ino]
            assert a.local == c.remote == f"127.0.0.1:{srv.getsockname()[1]}"
            assert a.remote == c.local


def test_proc_root_is_injectable(tmp_path, link4: Link) -> None:
    # A fake process 4242 whose fd 7 is our socket: the owner comes from the given proc root.
    fd_dir = tmp_path / "4242" / "fd"
    fd_dir.mkdir(parents=True)
    (fd_dir / "7").symlink_to(f"socket:[{link4.inode}]")
    (fd_dir / "8").symlink_to("pipe:[99]")
    samples = sample_tcp([4242], proc_root=str(tmp_path))
    assert [(s.pid, s.inode, s.local) for s in samples] == [(4242, link4.inode, link4.local())]


def test_unjoinable_namespace_is_skipped_with_a_warning(tmp_path, link4: Link, caplog) -> None:
    # Fake pid 4242's ns/net is no namespace file, so setns() fails for real; fake pid 4343
    # (no ns/net: our namespace) is still sampled.
    for pid, fd, ino in ((4242, 3, link4.inode), (4343, 4, _child_inode(link4))):
        (tmp_path / str(pid) / "fd").mkdir(parents=True)
        (tmp_path / str(pid) / "fd" / str(fd)).symlink_to(f"socket:[{ino}]")
    (tmp_path / "4242" / "ns").mkdir()
    (tmp_path / "4242" / "ns" / "net").write_text("")
    with caplog.at_level("WARNING"):
        samples = sample_tcp([4242, 4343], proc_root=str(tmp_path))
    assert [(s.pid, s.local) for s in samples] == [(4343, link4.remote())]
    assert "skipping the sockets of pids [4242]" in caplog.text


def _child_inode(link: Link) -> int:
    (only,) = sample_tcp([link.child.pid])
    return only.inode


def test_short_tcp_info_reads_missing_fields_as_zero(link4: Link) -> None:
    raw = link4.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)
    rtt, retrans, acked, received, rate, busy = parse_tcp_info(raw)
    assert rtt > 0 and acked >= PARENT_SENDS and received == CHILD_SENDS and rate > 0
    assert busy >= 0  # counted in jiffies: a quick loopback exchange may not reach one
    # Linux 4.9: struct ends before tcpi_busy_time (offset 168).
    assert parse_tcp_info(raw[:168]) == (rtt, retrans, acked, received, rate, 0)
    # Linux 4.6-4.8: struct ends before tcpi_delivery_rate (offset 160).
    assert parse_tcp_info(raw[:160]) == (rtt, retrans, acked, received, 0, 0)
    # Linux 3.x: struct ends after tcpi_total_retrans (104 bytes): no byte counters.
    assert parse_tcp_info(raw[:104]) == (rtt, retrans, 0, 0, 0, 0)
    assert parse_tcp_info(b"") == (0, 0, 0, 0, 0, 0)


def test_to_columns_round_trips_through_the_wire(link4: Link) -> None:
    pid = link4.child.pid
    samples = sample_tcp([pid, os.getpid()])
    stranger = SocketSample(1, 1, "10.0.0.1:1", "10.0.0.2:2", 0, 0, 0, 0, 0, 0, "ESTABLISHED")
    cols = to_columns([*samples, stranger], {pid: 5, os.getpid(): 9})
    assert len(cols) == len(samples)  # the pid that is no rank is dropped
    decoded = codec.decode_conns(codec.encode_conns("job", cols))
    by_rank = {int(r): i for i, r in enumerate(decoded["rank"]) if r == 5}
    (row5,) = by_rank.values()
    assert decoded.names("local")[row5] == link4.remote()
    assert decoded.names("remote")[row5] == link4.local()
    assert int(decoded["bytes_acked"][row5]) >= CHILD_SENDS
    assert len(set(decoded.strings)) == len(decoded.strings)
    assert len(to_columns([], {})) == 0


def test_link_sampler_pairs_both_ends(link4: Link) -> None:
    with LinkSampler({0: link4.child.pid, 1: os.getpid()}) as sampler:
        cols = sampler.sample()
    local, remote = cols.names("local"), cols.names("remote")
    rank0 = np.flatnonzero(cols["rank"] == 0)
    assert len(rank0) == 1
    r0 = rank0[0]
    peer = np.flatnonzero((local == remote[r0]) & (remote == local[r0]))
    assert len(peer) == 1 and cols["rank"][peer[0]] == 1
    assert cols["bytes_received"][peer[0]] == CHILD_SENDS
    assert codec.decode_conns(codec.encode_conns("job", cols)).strings == cols.strings


def test_concat_columns_merges_string_tables() -> None:
    a = to_columns([SocketSample(1, 1, "a:1", "b:2", 5, 1, 2, 3, 4, 0, "ESTABLISHED")], {1: 0})
    b = to_columns([SocketSample(2, 2, "b:2", "a:1", 6, 7, 8, 9, 10, 1, "ESTABLISHED")], {2: 1})
    both = concat_columns([a, b])
    assert list(both.names("local")) == ["a:1", "b:2"]
    assert list(both.names("remote")) == ["b:2", "a:1"]
    assert list(both["bytes_acked"]) == [1, 7]
    assert both.strings == ["a:1", "b:2"]
