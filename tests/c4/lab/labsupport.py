"""Helpers of the lab tests: the root check, a lab built once per module, fake rank processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def skip_unless_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root: network namespaces, tc, nftables, cgroups")
    for tool in ("ip", "tc", "nft"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool!r} missing: scripts/system-deps.sh installs it")


def lab_fixture(lab_dir: Path, spec: Any, services: bool) -> Iterator[dict[str, Any]]:
    from c4.lab import fabric
    from c4.lab.lab import down, up

    skip_unless_root()
    if any(fabric.leftovers().values()):
        pytest.skip("a lab (c4l-*) is already up on this machine; not touching it")
    st = up(lab_dir, spec, services=services)
    try:
        yield st
    finally:
        down(lab_dir)
        _assert_nothing_left(lab_dir)


def _assert_nothing_left(lab_dir: Path) -> None:
    """After ``down``: no namespace, link, cgroup or nft table named c4l-*, and no process of
    the lab (ranks, torchruns, sidecars, daemon, fault timers) still running."""
    from c4.lab import fabric
    from c4.lab.procs import lab_processes

    left = fabric.leftovers()
    assert not any(left.values()), left
    procs = lab_processes(str(lab_dir))
    assert not procs, [(p.pid, p.env.get("C4_HOST"), p.env.get("C4_JOB")) for p in procs]


@contextlib.contextmanager
def fake_rank(st: dict[str, Any], host: str, local_rank: int, rank: int
              ) -> Iterator[subprocess.Popen[bytes]]:
    """A busy process in a host's namespace that the lab takes for rank ``rank`` on GPU
    ``host/gpu<local_rank>`` (the environment torchrun and ``c4 lab run`` give a worker)."""
    from c4.lab_state import MARKER

    env = {**os.environ, MARKER: st["lab_dir"], "C4_HOST": host,
           "LOCAL_RANK": str(local_rank), "RANK": str(rank)}
    proc = subprocess.Popen(["ip", "netns", "exec", st["hosts"][host]["ns"], sys.executable,
                             "-c", "while True: pass"], env=env)
    try:
        # until `ip netns exec` became python (seconds on a loaded machine). `ip`'s own
        # arguments hold the script too, and its environment reads empty while it execs, so
        # wait for python's argv[0].
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
                if argv[0] == sys.executable.encode():
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the fake rank {rank} did not start in 30 s")
            time.sleep(0.02)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def cpu_rate(pid: int, seconds: float = 1.0) -> float:
    """CPU seconds per second the process used over ``seconds``."""
    from c4.lab.procs import cpu_seconds

    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
