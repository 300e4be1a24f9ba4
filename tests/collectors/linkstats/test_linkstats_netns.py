"""delivery_rate on a real shaped link: two network namespaces joined by a veth pair, a TCP
transfer across it, sampled from this (the root) namespace through the sender's namespace."""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from collectors.linkstats.tcp import TcpSampler

pytestmark = [pytest.mark.root, pytest.mark.network]

SHAPED_RATE = 20_000_000 // 8  # tbf rate 20mbit, in bytes/s

RECEIVER = r"""
import socket, sys
srv = socket.create_server(("0.0.0.0", 0))
print(srv.getsockname()[1], flush=True)
while True:
    conn, _ = srv.accept()
    while conn.recv(1 << 20):
        pass
    conn.close()
"""

# Sends as fast as the link allows until its stdin closes.
SENDER = r"""
import os, socket, sys, threading
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print(os.getpid(), flush=True)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
chunk = b"x" * (1 << 20)
while not stop.is_set():
    sock.sendall(chunk)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Pair:
    sender_ns: str
    receiver_ns: str
    dev: str  # the sender's veth end
    receiver_ip: str


@pytest.fixture
def netns_pair() -> Iterator[Pair]:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces, a veth pair and a tbf qdisc")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs iproute2 (`ip`, `tc`): apt-get install iproute2")
    tag = secrets.token_hex(3)
    pair = Pair(f"c4t-{tag}-s", f"c4t-{tag}-r", f"c4t{tag}s", "10.213.7.2")
    peer = f"c4t{tag}r"
    try:
        _ip("netns", "add", pair.sender_ns)
        _ip("netns", "add", pair.receiver_ns)
        _ip("link", "add", pair.dev, "type", "veth", "peer", "name", peer)
        _ip("link", "set", pair.dev, "netns", pair.sender_ns)
        _ip("link", "set", peer, "netns", pair.receiver_ns)
        _ip("-n", pair.sender_ns, "addr", "add", "10.213.7.1/24", "dev", pair.dev)
        _ip("-n", pair.receiver_ns, "addr", "add", f"{pair.receiver_ip}/24", "dev", peer)
        for ns, dev in ((pair.sender_ns, pair.dev), (pair.receiver_ns, peer)):
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        # Deleting a namespace deletes the veth end inside it; a half-made pair may still be here.
        for ns in (pair.sender_ns, pair.receiver_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", pair.dev], capture_output=True)
        subprocess.run(["ip", "link", "del", peer], capture_output=True)


def _in_ns(ns: str, code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.stdin:
        proc.stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _transfer_rates(pair: Pair, port: int, min_bytes: int, sampler: TcpSampler
                    ) -> tuple[list[int], float]:
    """delivery_rate of the sender's socket, sampled during the transfer once the connection
    has carried ``min_bytes`` (past slow start), and bytes over busy time between the first and
    the last of those samples."""
    sender = _in_ns(pair.sender_ns, SENDER, pair.receiver_ip, str(port))
    try:
        pid = int(sender.stdout.readline())
        rates: list[int] = []
        kept = []
        deadline = time.monotonic() + 20
        while len(rates) < 8 and time.monotonic() < deadline:
            samples = sampler.sample([pid])
            assert len(samples) <= 1, samples
            if samples and samples[0].bytes_acked >= min_bytes:
                assert samples[0].remote == f"{pair.receiver_ip}:{port}"
                assert samples[0].rtt_us > 0
                rates.append(samples[0].delivery_rate)
                kept.append(samples[0])
            time.sleep(0.05)
        assert len(rates) == 8, "the transfer never got going: check the veth link"
        busy_s = (kept[-1].busy_us - kept[0].busy_us) / 1e6
        moved = kept[-1].bytes_acked - kept[0].bytes_acked
        return rates, moved / busy_s if busy_s > 0 else float("inf")
    finally:
        _stop(sender)


def test_delivery_rate_reflects_tbf_shaping(netns_pair: Pair) -> None:
    receiver = _in_ns(netns_pair.receiver_ns, RECEIVER)
    try:
        port = int(receiver.stdout.readline())
        with TcpSampler() as sampler:
            free_rates, _ = _transfer_rates(netns_pair, port, 20 << 20, sampler)
            free = statistics.median(free_rates)
            subprocess.run(
                ["ip", "netns", "exec", netns_pair.sender_ns, "tc", "qdisc", "add", "dev",
                 netns_pair.dev, "root", "tbf", "rate", "20mbit", "burst", "32kbit",
                 "latency", "100ms"],
                check=True, capture_output=True,
            )
            shaped_rates, shaped_busy = _transfer_rates(netns_pair, port, 1 << 20, sampler)
            shaped = statistics.median(shaped_rates)
    finally:
        receiver.kill()
        receiver.wait()
    # The estimate tracks the bottleneck: near 2.5 MB/s, far below the unshaped veth.
    assert 0.5 * SHAPED_RATE < shaped < 1.5 * SHAPED_RATE, (shaped, free)
    assert free > 10 * shaped, (shaped, free)
    # Busy time (jiffy resolution) gives the same rate: what the daemon's transfer records use.
    assert 0.5 * SHAPED_RATE < shaped_busy < 1.5 * SHAPED_RATE, shaped_busy
