"""Where the demo runs: the fault lab (root: hosts as network namespaces, real link faults) or
plain local processes (no root: hosts are labels, process-level faults)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import Any, Protocol

from c4.demo.services import start_daemon, start_sidecar
from c4.processes import Service, free_port

log = logging.getLogger(__name__)


class DemoEnv(Protocol):
    name: str
    daemon: str
    hosts: list[str]
    nproc: int
    workdir: Path

    def launch_args(self) -> list[str]:
        """Options of `c4 launch` that place the job on this environment's hosts."""
        ...

    def train_env(self) -> dict[str, str]:
        """Extra environment of the training script."""
        ...

    def slow_fault(self) -> tuple[str, str]:
        """Plant the first fault (a slowdown); returns (what, the component at fault)."""
        ...

    def hang_fault(self, host: str) -> tuple[str, str]:
        """Make one rank of ``host`` stop; returns (what, the component at fault)."""
        ...

    def clear_faults(self) -> None: ...

    def accepted(self, culprit: str) -> set[str]:
        """Ids of the components a report may name for the fault just planted at ``culprit``
        (what an operator would call the faulty part)."""
        ...

    def end_hang(self) -> None:
        """Kill the hung rank (the restart stops it anyway): resumed, it would run on into
        calls its stopped peers never join and look like a second hang."""
        ...

    def close(self) -> None: ...


def lab_available() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None \
        and Path("/sys/fs/cgroup/freezer").is_dir()


class LabEnv:
    """4 hosts x 2 ranks as namespaces on a leaf/spine fabric, the lab's daemon and sidecars."""

    name = "fault lab (network namespaces)"

    def __init__(self, workdir: Path, hosts: int = 4, gpus_per_host: int = 2) -> None:
        from c4.lab import lab
        from c4.lab.layout import LabSpec

        self.workdir = workdir
        self.lab_dir = workdir / "lab"
        self.state = lab.up(self.lab_dir, LabSpec(hosts=hosts, gpus_per_host=gpus_per_host))
        self.daemon = self.state["daemon"]["address"]
        self.hosts = sorted(self.state["hosts"])
        self.nproc = gpus_per_host

    def launch_args(self) -> list[str]:
        return ["--lab", str(self.lab_dir)]

    def train_env(self) -> dict[str, str]:
        # A 2D job with a sizeable all-reduce: link faults then show in some groups and not
        # in others, which is what localizes them from the ranks' own records.
        return {"C4_TRAIN_GRID": "1", "C4_TRAIN_HIDDEN": "2048"}

    def slow_fault(self) -> tuple[str, str]:
        from c4.lab import faults

        host = self.hosts[-1]
        leaf = self.state["hosts"][host]["leaf"]
        link = "~".join(sorted([leaf, f"{host}/nic0"]))
        faults.inject(self.lab_dir, "slow-link", link, rate_mbit=20, duration=90)
        return f"slow link {link} (tbf 20 Mbit/s, at most 90 s)", link

    def hang_fault(self, host: str) -> tuple[str, str]:
        from c4.lab import faults

        gpu = f"{host}/gpu{self.nproc - 1}"
        rec = faults.inject(self.lab_dir, "hang", gpu)
        self._hung = [int(pid) for pid in rec.get("undo", {}).get("back", {})]
        return f"hang of the rank on {gpu} (cgroup freezer)", gpu

    def end_hang(self) -> None:
        from c4.lab import faults

        for pid in getattr(self, "_hung", []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # delivered as the freezer thaws it
        faults.clear(self.lab_dir)

    def clear_faults(self) -> None:
        from c4.lab import faults

        faults.clear(self.lab_dir)

    def accepted(self, culprit: str) -> set[str]:
        from c4.lab.truth import truth
        from c4.lab_state import read

        planted = truth(read(self.lab_dir))["faults"]  # the lab's ground truth
        return {a["id"] for a in planted[-1]["accept"]} if planted else {culprit}

    def close(self) -> None:
        from c4.lab import lab

        lab.down(self.lab_dir)


class LocalEnv:
    """A daemon and one sidecar per host label on this machine; faults by signals."""

    name = "local processes (no root: hosts are labels)"

    def __init__(self, workdir: Path, hosts: int = 4) -> None:
        self.workdir = workdir
        port = free_port()
        self.services: list[Service] = [start_daemon(workdir, port)]
        self.daemon = f"127.0.0.1:{port}"
        self.hosts = [f"node{i}" for i in range(hosts)]
        self.nproc = 1
        self.sockets: dict[str, Path] = {}
        for host in self.hosts:
            svc, sock = start_sidecar(workdir, port, host)
            self.services.append(svc)
            self.sockets[host] = sock
        self._stopped: set[int] = set()
        self.fault_file = workdir / "planted-faults.json"

    def launch_args(self) -> list[str]:
        return ["--sidecar-socket", ",".join(f"{h}={s}" for h, s in self.sockets.items())]

    def train_env(self) -> dict[str, str]:
        return {"C4_TRAIN_FAULT_FILE": str(self.fault_file)}

    def _ranks(self, host: str) -> list[Any]:
        from diagnosis.client import DaemonClient

        with DaemonClient(self.daemon) as client:
            jobs = client.jobs()
            return [r for j in jobs[:1] for r in client.ranks(j.job) if r.host == host]

    def _pid(self, host: str) -> int:
        ranks = self._ranks(host)
        if not ranks:
            raise RuntimeError(f"no rank of the demo job runs on {host} yet")
        return ranks[-1].pid

    def accepted(self, culprit: str) -> set[str]:
        # without a topology the daemon names hosts or ranks
        return {culprit} | {str(r.rank) for r in self._ranks(culprit)}

    def slow_fault(self) -> tuple[str, str]:
        # Without root there is no CPU quota to impose from outside, and stopping the process
        # by signals mostly freezes it inside collectives (a network-like fault, not a slow
        # GPU): the training script computes longer on this host while the fault file says so.
        host = self.hosts[-1]
        self.fault_file.write_text(json.dumps({host: 60}))
        return f"slow compute on {host} (60 ms more per step, planted in the script)", host

    def hang_fault(self, host: str) -> tuple[str, str]:
        pid = self._pid(host)
        os.kill(pid, signal.SIGSTOP)
        self._stopped.add(pid)
        return f"hang of the rank on {host} (pid {pid}, SIGSTOP)", host

    def clear_faults(self) -> None:
        self.fault_file.unlink(missing_ok=True)

    def end_hang(self) -> None:
        for pid in self._stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._stopped.clear()

    def _resume_stopped(self) -> None:
        for pid in self._stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._stopped.clear()

    def close(self) -> None:
        self.clear_faults()
        self._resume_stopped()
        for svc in reversed(self.services):
            svc.stop(timeout=15)


def open_env(workdir: Path, *, local: bool) -> Any:
    if not local and lab_available():
        return LabEnv(workdir)
    return LocalEnv(workdir)
