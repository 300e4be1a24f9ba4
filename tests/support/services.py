"""Start real c4 daemons and sidecars as subprocesses for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    """Poll ``cond`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # the service may not be up yet
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                         + (f" (last error: {last_exc})" if last_exc else ""))


class Service:
    """A c4 subcommand in its own process, with its output in a log file."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        fh = open(self.log, "ab")  # noqa: SIM115 - handed to the child process
        self.proc = subprocess.Popen([sys.executable, "-m", "c4", *self.args], stdout=fh,
                                     stderr=subprocess.STDOUT, env=self.env)
        fh.close()
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_daemon(tmp: Path, port: int, store: str | None = None, name: str = "daemon",
                 extra: list[str] | None = None) -> Service:
    from diagnosis.client import DaemonClient

    store = store or f"sqlite:///{tmp / 'c4.db'}"
    svc = Service(["daemon", "--listen", f"127.0.0.1:{port}", "--store", store,
                   *(extra or [])], tmp / f"{name}.log").start()
    client = DaemonClient(f"127.0.0.1:{port}", timeout=2.0)
    try:
        wait_for(lambda: client.status(), 30, what=f"daemon on port {port}: {svc.output()}")
    finally:
        client.close()
    return svc


def start_sidecar(tmp: Path, port: int, host: str, name: str | None = None) -> tuple[Service, Path]:
    name = name or f"sidecar-{host}"
    sock = tmp / f"{name}.sock"
    svc = Service(["sidecar", "--daemon", f"127.0.0.1:{port}", "--socket", str(sock),
                   "--host", host, "--spill-dir", str(tmp / f"{name}-spill")],
                  tmp / f"{name}.log").start()
    wait_for(sock.exists, 30, what=f"sidecar socket {sock}")
    return svc, sock
