"""Local processes for the demo, the lab, the tests and the recovery supervisor: a `Service` with
its log, free ports, waiting on a condition, one node of a torchrun job. Starting c4's own
services (a daemon, a sidecar) is `c4.demo.services`, which needs the daemon's client."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import site
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The folder that holds c4's top-level packages (c4, collectors, recovery, ...): the checkout
#: when c4 runs from source, an interpreter's site-packages when it is installed.
REPO = Path(__file__).resolve().parent.parent


def _site_dirs() -> set[Path]:
    paths = sysconfig.get_paths()
    dirs = [paths["purelib"], paths["platlib"], *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return {Path(d).resolve() for d in dirs}


def python_path_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment that lets a Python this process starts (``sys.executable``) import c4
    from where this process did: nothing when c4 is installed in the interpreter (a wheel), the
    checkout first on ``PYTHONPATH`` when it runs from source (``python -m c4`` in the checkout
    finds it through the working directory, which the launched process does not share)."""
    if REPO in _site_dirs():
        return {}
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")]))}


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now.

    Chosen below the kernel's ephemeral range: a port the kernel handed out once may be handed
    to an outgoing connection before our server binds it, and a busy test run opens many.
    """
    low = _ephemeral_low()
    if low > 4096:
        for _ in range(64):
            port = random.randrange(max(1024, low - 12000), low)
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_on_signals() -> threading.Event:
    """An event that SIGTERM and SIGINT set (their handlers installed now: main thread only)."""
    stop = threading.Event()

    def _signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _signal)
    signal.signal(signal.SIGINT, _signal)
    return stop


def wait_until(stop: threading.Event) -> None:
    """Block until ``stop`` is set. In slices: the kernel may deliver SIGTERM to another
    thread, and Python runs the handler only when the main thread next runs Python bytecode;
    an untimed wait would never return."""
    while not stop.wait(0.5):
        pass


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    """Poll ``cond`` until it returns a truthy value; raise TimeoutError naming ``what``."""
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
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}"
                       + (f" (last error: {last_exc})" if last_exc else ""))


class Service:
    """A command in its own process, with its output in a log file."""

    def __init__(self, args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(self.args, stdout=fh, stderr=subprocess.STDOUT,
                                         env=self.env, start_new_session=True)
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        return self._started().pid

    def exit_code(self) -> int | None:
        """The exit code once the process has ended (negative: killed by that signal)."""
        return self._started().poll()

    def _started(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            raise RuntimeError(f"{self.args[0]} was never started (call start() first)")
        return self.proc

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """Signal the process and everything it started (its own session), then reap it."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal_group(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait()
        self._signal_group(signal.SIGKILL)  # children that outlived their parent
        return self.proc.returncode

    def _signal_group(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def c4_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "c4", *args]


def torchrun_node(workdir: Path, script: Path | str, *, node: int, nnodes: int,
                  nproc: int, master_port: int, sidecar_socket: Path, job: str,
                  env: dict[str, str] | None = None, args: Sequence[str] = ()) -> Service:
    """One "node" of a multi-node torchrun job on this machine, its ranks reporting to the
    node's sidecar under host id ``node<N>``."""
    full_env = {"C4_SIDECAR_SOCKET": str(sidecar_socket), "C4_HOST": f"node{node}",
                "C4_JOB": job, "OMP_NUM_THREADS": "1",
                **python_path_env(),
                **(env or {})}
    return Service([sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
                    "--nproc-per-node", str(nproc), "--node-rank", str(node), "--master-addr",
                    "127.0.0.1", "--master-port", str(master_port), str(script), *args],
                   workdir / f"{job}-node{node}.log", env=full_env).start()
