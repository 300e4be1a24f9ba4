"""The host's internals (GPUs, NICs, GPU-NIC pairing, switch ports) for the daemon: discovered
at start and again every ``interval_s``, shipped as a ``HostTopology`` request whenever they
differ from what was shipped last.

Discovery runs in its own thread, so a slow ``nvidia-smi`` never holds up the sidecar's
shipping; each tool has a time limit (``timeout_s``) and a missing one is only noted in the
internals' issues (``c4.topology.discover``). A round runs three short commands and reads
a few sysfs files, once per interval: its cost is that of the tools themselves."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from c4.proto import c4_pb2
from c4.topology.discover import Runner, discover_host, recorded_runner, run_command
from c4.topology.host_internals import HostInternals
from c4.topology.importers.common import clean_id

log = logging.getLogger(__name__)

#: ``--discover`` values besides a directory of recorded outputs
ON, OFF = "on", "off"


def port_map(hi: HostInternals) -> dict[str, str]:
    """The sidecar's port names (``mlx5_0/1``, ``eth0``: ``ports.py``) -> the topology id the
    daemon gives each discovered NIC (``<host>/<name>``, as ``importers.host`` names them), so
    port records name the NICs of the assembled topology without a ``--nic-map``."""
    out: dict[str, str] = {}
    for n in hi.nics:
        nic = f"{hi.host}/{clean_id(n.name)}"
        if n.ibdev:
            out[f"{n.ibdev}/{n.port or 1}"] = nic
        if n.netdev:
            out[n.netdev] = nic
    return out


def make_runner(discover: str, timeout_s: float) -> Runner | None:
    """The runner ``--discover`` asks for: the host's tools (``on``), none (``off``), or the
    outputs recorded in a directory."""
    if discover == OFF:
        return None
    if discover == ON:
        return partial(run_command, timeout_s=timeout_s)
    return recorded_runner(Path(discover))


class HostDiscovery:
    def __init__(self, host: str, put: Callable[..., None], runner: Runner, *,
                 sysfs_root: str = "/sys", interval_s: float = 300.0,
                 on_change: Callable[[HostInternals], None] | None = None) -> None:
        self.host = host
        self.put = put            # the outbox's: queue one request (logged, resent until acked)
        self.on_change = on_change    # told the new internals (the port watch's map)
        self.runner = runner
        self.sysfs_root = sysfs_root
        self.interval_s = interval_s
        self.digest = ""          # of the internals last shipped
        self.rounds = 0
        self.shipped = 0
        self.cpu_s = 0.0          # this thread's CPU time spent discovering
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="c4-discovery", daemon=True)

    def discover_once(self) -> bool:
        """One round; True when the internals changed and were queued for the daemon."""
        t0 = time.thread_time()
        try:
            hi = discover_host(self.runner, self.sysfs_root, hostname=self.host)
        finally:
            self.cpu_s += time.thread_time() - t0
            self.rounds += 1
        text = json.dumps(hi.to_json(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest == self.digest:
            return False
        self.put(host_topology=c4_pb2.HostTopology(host=self.host, t_ns=time.time_ns(),
                                                   internals=text, digest=digest))
        self.digest = digest
        self.shipped += 1
        if self.on_change is not None:
            self.on_change(hi)
        log.info("host %s: %d GPUs, %d NICs discovered (%s); sent to the daemon", self.host,
                 len(hi.gpus), len(hi.nics), ", ".join(hi.sources) or "no tool answered")
        return True

    def _run(self) -> None:
        while True:
            try:
                self.discover_once()
            except Exception:   # discovery must never take the sidecar down
                log.exception("discovery on host %s failed; trying again in %.0f s", self.host,
                              self.interval_s)
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
