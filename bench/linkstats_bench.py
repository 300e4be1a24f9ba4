"""Time LinkSampler.sample() on this machine: ranks holding loopback TCP sockets.

    python bench/linkstats_bench.py [--ranks 8] [--conns 4] [--extra-fds 200] [--noise 256]

Each rank is a child process holding ``conns`` loopback connections (both ends: 2*conns
sockets) and ``extra-fds`` other open files, as a training process has; ``noise`` established
sockets of a process that is no rank show what filtering the other sockets of the host costs.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from collectors.linkstats import LinkSampler, sample_tcp

RANK = r"""
import os, socket, sys
conns, extra = int(sys.argv[1]), int(sys.argv[2])
srv = socket.create_server(("127.0.0.1", 0))
held = [open(os.devnull) for _ in range(extra)]
for _ in range(conns):
    c = socket.create_connection(srv.getsockname())
    s, _ = srv.accept()
    c.sendall(b"x" * 100000); n = 0
    while n < 100000:
        n += len(s.recv(1 << 16))
    held += [c, s]
print("ready", flush=True)
sys.stdin.read()
"""


def _time(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """Median and p95 of ``calls`` calls, in ms."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times) * 1e3, times[int(0.95 * len(times)) - 1] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--extra-fds", type=int, default=200)
    ap.add_argument("--noise", type=int, default=256)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()

    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(args.conns), str(args.extra_fds)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(args.ranks)]
    noise = []
    srv = socket.create_server(("127.0.0.1", 0), backlog=args.noise)
    for _ in range(args.noise // 2):
        noise.append(socket.create_connection(srv.getsockname()))
        noise.append(srv.accept()[0])
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        pids = {r: p.pid for r, p in enumerate(procs)}
        rows = []
        with LinkSampler(pids) as sampler:
            n = len(sampler.sample())
            rows.append(("LinkSampler.sample (warm)", n, _time(sampler.sample, args.calls)))
        cold = lambda: sample_tcp(pids.values())  # noqa: E731  new sampler: full fd scan
        rows.append(("sample_tcp (cold)", len(cold()), _time(cold, args.calls)))
        print(f"{args.ranks} ranks x {2 * args.conns} sockets, {args.extra_fds} other fds each; "
              f"{args.noise} established sockets of a non-rank process")
        print(f"{'case':<26} {'rows':>5} {'median ms':>10} {'p95 ms':>8}")
        for label, n, (med, p95) in rows:
            print(f"{label:<26} {n:>5} {med:>10.2f} {p95:>8.2f}")
    finally:
        for p in procs:
            p.stdin.close()
            p.wait()
        for s in noise:
            s.close()


if __name__ == "__main__":
    main()
