"""Traffic probes run inside a lab namespace (standard library only, quick to start):

    python -m c4.lab.probe tcp-sink PORT [--conns N]     # prints "ready", then per-connection
                                                         # JSON lines {"bytes", "seconds"}
    python -m c4.lab.probe tcp-send ADDR PORT BYTES [--conns N]   # N parallel flows
    python -m c4.lab.probe udp-sink PORT SECONDS         # prints "ready", then {"received"}
    python -m c4.lab.probe udp-send ADDR PORT COUNT
    python -m c4.lab.probe connect ADDR PORT             # open / refused / TimeoutError ...
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

CHUNK = 1 << 16


def tcp_sink(port: int, conns: int, timeout: float) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(64)
    srv.settimeout(timeout)
    print("ready", flush=True)
    lock = threading.Lock()

    def drain(c: socket.socket) -> None:
        t0, n = time.monotonic(), 0
        c.settimeout(timeout)
        while True:
            data = c.recv(CHUNK)
            if not data:
                break
            n += len(data)
        c.sendall(b"k")  # tells the sender the data arrived
        c.close()
        with lock:
            print(json.dumps({"bytes": n, "seconds": time.monotonic() - t0}), flush=True)

    threads = []
    for _ in range(conns):
        c, _ = srv.accept()
        t = threading.Thread(target=drain, args=(c,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def tcp_send(addr: str, port: int, nbytes: int, conns: int, timeout: float) -> None:
    """Send ``nbytes`` on each of ``conns`` connections at once; print the time each took
    until the receiver confirmed, and the local source ports (they pick the ECMP path)."""
    results: list[dict] = []
    payload = b"\0" * CHUNK

    def one() -> None:
        s = socket.create_connection((addr, port), timeout=timeout)
        sport = s.getsockname()[1]
        t0 = time.monotonic()
        left = nbytes
        while left > 0:
            left -= s.send(payload[:min(left, CHUNK)])
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
        results.append({"sport": sport, "seconds": time.monotonic() - t0})
        s.close()

    threads = [threading.Thread(target=one) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results), flush=True)


def udp_sink(port: int, seconds: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:  # room for every datagram even if this process is not scheduled for a while
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    except PermissionError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("0.0.0.0", port))
    s.settimeout(0.2)
    print("ready", flush=True)
    n, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            s.recv(2048)
            n += 1
        except TimeoutError:
            pass
    print(json.dumps({"received": n}), flush=True)


def udp_send(addr: str, port: int, count: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(count):
        s.sendto(b"x" * 512, (addr, port))
        time.sleep(0.0005)  # stay well under any shaper: losses are the rule's doing


def connect(addr: str, port: int, timeout: float) -> None:
    """Print whether ``addr`` answers: "open", "refused" (reached, no listener) or the error."""
    try:
        socket.create_connection((addr, port), timeout=timeout).close()
        print("open")
    except ConnectionRefusedError:
        print("refused")
    except OSError as exc:
        print(type(exc).__name__)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m c4.lab.probe")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("tcp-sink")
    a.add_argument("port", type=int)
    a.add_argument("--conns", type=int, default=1)
    a.add_argument("--timeout", type=float, default=30)
    a = sub.add_parser("tcp-send")
    a.add_argument("addr")
    a.add_argument("port", type=int)
    a.add_argument("nbytes", type=int)
    a.add_argument("--conns", type=int, default=1)
    a.add_argument("--timeout", type=float, default=30)
    a = sub.add_parser("udp-sink")
    a.add_argument("port", type=int)
    a.add_argument("seconds", type=float)
    a = sub.add_parser("udp-send")
    a.add_argument("addr")
    a.add_argument("port", type=int)
    a.add_argument("count", type=int)
    a = sub.add_parser("connect")
    a.add_argument("addr")
    a.add_argument("port", type=int)
    a.add_argument("--timeout", type=float, default=2)
    ns = p.parse_args(argv)
    if ns.cmd == "connect":
        return connect(ns.addr, ns.port, ns.timeout)
    if ns.cmd == "tcp-sink":
        tcp_sink(ns.port, ns.conns, ns.timeout)
    elif ns.cmd == "tcp-send":
        tcp_send(ns.addr, ns.port, ns.nbytes, ns.conns, ns.timeout)
    elif ns.cmd == "udp-sink":
        udp_sink(ns.port, ns.seconds)
    else:
        udp_send(ns.addr, ns.port, ns.count)


if __name__ == "__main__":
    main(sys.argv[1:])
