"""Measuring the lab's fabric from outside: transfers and datagrams between host namespaces
(through :mod:`c4.lab.probe`), interface counters, reachability."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from c4.lab import system
from c4.lab.system import LabError
from c4.processes import python_path_env

PROBE = [sys.executable, "-m", "c4.lab.probe"]


def _probe_env() -> dict[str, str]:
    """The probe imports c4 from where this process did (the checkout or the installed wheel)."""
    return {**os.environ, **python_path_env()}


def _sink(ns: str, args: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(["ip", "netns", "exec", ns, *PROBE, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_probe_env())
    assert proc.stdout is not None and proc.stderr is not None   # both PIPE above
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        raise LabError(f"probe in {ns} did not start: {line} {proc.stderr.read()[-500:]}")
    return proc


def _probe(ns: str, args: list[str], timeout: float = 60) -> str:
    out = subprocess.run(["ip", "netns", "exec", ns, *PROBE, *args], capture_output=True,
                         text=True, timeout=timeout, env=_probe_env())
    if out.returncode != 0:
        raise LabError(f"probe in {ns} failed: {out.stderr[-800:]}")
    return out.stdout


def tcp_transfer(st: dict[str, Any], src: str, dst: str, nbytes: int, *, conns: int = 1,
                 port: int = 5201, timeout: float = 60) -> list[dict[str, float]]:
    """Send ``nbytes`` on each of ``conns`` parallel TCP connections from host ``src`` to
    host ``dst``; per connection its source port and seconds until the receiver had it all."""
    h_src, h_dst = st["hosts"][src], st["hosts"][dst]
    sink = _sink(h_dst["ns"], ["tcp-sink", str(port), "--conns", str(conns),
                               "--timeout", str(timeout)])
    try:
        out = _probe(h_src["ns"], ["tcp-send", h_dst["addr"], str(port), str(nbytes),
                                   "--conns", str(conns), "--timeout", str(timeout)],
                     timeout=timeout + 5)
        sink.wait(timeout)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return json.loads(out.strip().splitlines()[-1])


def udp_delivery(st: dict[str, Any], src: str, dst: str, count: int = 400,
                 port: int = 5202) -> int:
    """Datagrams of ``count`` sent from ``src`` that reached ``dst``."""
    h_src, h_dst = st["hosts"][src], st["hosts"][dst]
    seconds = 1.0 + count * 0.001
    sink = _sink(h_dst["ns"], ["udp-sink", str(port), str(seconds)])
    try:
        _probe(h_src["ns"], ["udp-send", h_dst["addr"], str(port), str(count)])
        out, _ = sink.communicate(timeout=seconds + 10)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return int(json.loads(out.strip().splitlines()[-1])["received"])


def connect(st: dict[str, Any], src: str, dst: str, port: int = 9, timeout: float = 2.0) -> str:
    """"refused" or "open" when ``dst`` is reachable from ``src``, else the error's name."""
    return _probe(st["hosts"][src]["ns"], ["connect", st["hosts"][dst]["addr"], str(port),
                                           "--timeout", str(timeout)]).strip()


def counters(ns: str, ifname: str) -> dict[str, int]:
    """The interface's kernel counters (rx_bytes, tx_bytes, rx_packets, ...)."""
    out = system.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", ifname]).stdout
    stats = json.loads(out)[0]["stats64"]
    return {f"{d}_{k}": int(v) for d in ("rx", "tx") for k, v in stats[d].items()}
