"""One daemon (behind a relay that can be cut) and one sidecar, as real processes, with their
peak resident memory, the sidecar's CPU time and its drop counters sampled as they run."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

from bench.chaos.relay import Relay
from c4.demo.services import start_daemon
from c4.processes import Service, c4_command, free_port, wait_for
from diagnosis.client import DaemonClient
from tests.support.services import Samples, scrape


def _proc_field(pid: int, key: str) -> float:
    """A kB field of /proc/PID/status (VmHWM: peak resident size), in MiB; 0 if gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, every thread, so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cluster:
    def __init__(self, workdir: Path, *, store: str = "sqlite", spill_dir: Path | None = None,
                 sidecar_args: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.daemon_port, relay_port = free_port(), free_port()
        url = f"sqlite:///{workdir / 'c4.db'}" if store == "sqlite" else "memory://"
        self.daemon = start_daemon(workdir, self.daemon_port, url)
        self.relay = Relay(self.daemon_port, relay_port)
        self.sock = workdir / "sidecar.sock"
        self.spill = spill_dir or workdir / "spill"
        self.metrics_port = free_port()
        self._args = c4_command("sidecar", "--daemon", f"127.0.0.1:{relay_port}", "--socket",
                                str(self.sock), "--host", "node0", "--spill-dir",
                                str(self.spill), "--metrics", f"127.0.0.1:{self.metrics_port}",
                                *sidecar_args)
        self.sidecar: Service | None = None
        self.peak_mib = {"sidecar": 0.0, "daemon": 0.0}
        self._ended_drops = 0.0   # drops counted by sidecar processes that have ended
        self._live_drops = 0.0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_loop, daemon=True)
        self._sampler.start()

    # -- the sidecar ---------------------------------------------------------------------------
    def start_sidecar(self) -> None:
        self.sidecar = Service(self._args, self.workdir / "sidecar.log").start()
        wait_for(lambda: self.metrics(), 60, what="the sidecar's metrics")

    def kill_sidecar(self) -> None:
        """SIGKILL, after reading its drop counters one last time."""
        self._end_sidecar(lambda s: s.kill())

    def stop_sidecar(self) -> None:
        self._end_sidecar(lambda s: s.stop())

    def _end_sidecar(self, end) -> None:
        if self.sidecar is None or not self.sidecar.running():
            return
        self._sample()
        self._ended_drops += self._live_drops
        self._live_drops = 0.0
        end(self.sidecar)

    @property
    def sidecar_pid(self) -> int:
        assert self.sidecar is not None and self.sidecar.proc is not None
        return self.sidecar.proc.pid

    def metrics(self) -> Samples:
        return scrape(self.metrics_port)

    def metric(self, name: str) -> float:
        return sum(v for (n, _), v in self.metrics().items() if n == name)

    def sidecar_drops(self) -> int:
        """Records every sidecar process so far dropped and counted, all reasons."""
        self._sample()
        return int(self._ended_drops + self._live_drops)

    def drained(self) -> bool:
        """Nothing left unacknowledged in the sidecar."""
        return self.metric("c4_sidecar_unacked_requests") == 0

    # -- the daemon ----------------------------------------------------------------------------
    def freeze_daemon(self) -> None:
        assert self.daemon.proc is not None
        os.kill(self.daemon.proc.pid, signal.SIGSTOP)

    def thaw_daemon(self) -> None:
        assert self.daemon.proc is not None
        os.kill(self.daemon.proc.pid, signal.SIGCONT)

    def client(self) -> DaemonClient:
        return DaemonClient(f"127.0.0.1:{self.daemon_port}", timeout=60.0)

    # -- sampling ------------------------------------------------------------------------------
    def _sample(self) -> None:
        for name, svc in (("sidecar", self.sidecar), ("daemon", self.daemon)):
            if svc is not None and svc.proc is not None:
                self.peak_mib[name] = max(self.peak_mib[name],
                                          _proc_field(svc.proc.pid, "VmHWM:"))
        if self.sidecar is not None and self.sidecar.running():
            with contextlib.suppress(OSError):
                self._live_drops = self.metric("c4_sidecar_dropped_records_total")

    def _sample_loop(self) -> None:
        while not self._stop.wait(0.25):
            with contextlib.suppress(Exception):
                self._sample()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            self.thaw_daemon()
        if self.sidecar is not None:
            self.sidecar.stop()
        self.relay.close()
        self.daemon.stop()
