"""``c4 lab up / down / run``: the fabric, the daemon and one sidecar per host namespace, and
training jobs with one torchrun node per host."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from c4 import lab_state as state
from c4.lab import fabric, system
from c4.lab.layout import HOST_FABRIC_IF, PREFIX, LabSpec, Layout, build_layout
from c4.lab.procs import host_psi_group, host_psi_view, make_cgroup, mount_psi
from c4.lab.system import LabError
from c4.processes import REPO, Service, c4_command, wait_for

log = logging.getLogger(__name__)

EXAMPLE = Path(__file__).with_name("train_example.py")


def layout_of(st: dict[str, Any]) -> Layout:
    return build_layout(LabSpec(**st["spec"]))


def _env(lab_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {state.MARKER: str(lab_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                        os.environ.get("PYTHONPATH")])),
            **(extra or {})}


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def up(lab_dir: Path, spec: LabSpec, *, services: bool = True,
       analyze_interval: float = 1.0) -> dict[str, Any]:
    """Build the lab; return its state. Raises LabError if a lab (or its leftovers) exists."""
    system.require_root()
    lab_dir.mkdir(parents=True, exist_ok=True)
    with state.locked(lab_dir):
        if state.read(lab_dir) is not None:
            raise LabError(f"a lab is already up (state in {lab_dir / state.STATE_FILE}): "
                           "use it, or `c4 lab down` first")
        left = fabric.leftovers()
        if any(left.values()):
            raise LabError(f"leftovers of an earlier lab exist ({_describe(left)}), perhaps "
                           f"another lab directory: run `c4 lab down` first")
        lay = build_layout(spec)
        topo_path = lab_dir / "topology.json"
        lay.topology.save(topo_path)
        st: dict[str, Any] = {
            "version": 1, "spec": asdict(spec), "lab_dir": str(lab_dir),
            "created_at": time.time(), "topology": str(topo_path),
            "hosts": {h: {"ns": lay.ns(h), "addr": lay.host_addr[h], "ifname": HOST_FABRIC_IF,
                          "mgmt_addr": lay.mgmt_addr[h], "leaf": lay.leaf_of[h]}
                      for h in lay.hosts},
            "daemon": None, "sidecars": {}, "faults": [], "jobs": []}
        try:
            fabric.build(lay)
            state.write(lab_dir, st)  # from here on `down` knows the lab even if we crash
            if services:
                _start_services(lab_dir, lay, st, analyze_interval)
                state.write(lab_dir, st)
        except BaseException:
            fabric.teardown(str(lab_dir))
            state.archive(lab_dir)
            raise
    return st


def _start_services(lab_dir: Path, lay: Layout, st: dict[str, Any],
                    analyze_interval: float) -> None:
    from diagnosis.client import DaemonClient

    gw = lay.mgmt_gateway
    port = _free_port(gw)
    addr = f"{gw}:{port}"
    store = f"sqlite:///{lab_dir / 'c4.db'}"
    # The management bridge is the lab's own private network on this machine: plaintext is
    # what a test fabric wants (production daemons on such addresses must use TLS).
    daemon = Service(c4_command("daemon", "--listen", addr, "--store", store, "--topology",
                                st["topology"], "--analyze-interval", str(analyze_interval),
                                "--insecure"),
                     lab_dir / "daemon.log", env=_env(lab_dir)).start()
    st["daemon"] = {"address": addr, "pid": daemon.proc.pid, "store": store,
                    "log": str(daemon.log)}
    cars = {}
    mount_psi()
    for host in lay.hosts:
        make_cgroup("unified", host_psi_group(host).name, {})
        sock = lab_dir / host / "sidecar.sock"
        sock.parent.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        svc = Service(["ip", "netns", "exec", lay.ns(host),
                       *c4_command("sidecar", "--daemon", addr, "--host", host, "--socket",
                                   str(sock), "--spill-dir", str(lab_dir / host / "spill"),
                                   "--nic-map", f"{HOST_FABRIC_IF}={host}/nic0",
                                   # the host's PSI: its v2 group (c4.lab.faults cpu-contention)
                                   "--health", "--health-gpu", "off", "--kmsg", "",
                                   "--health-cgroup", str(host_psi_view(host)))],
                      lab_dir / host / "sidecar.log", env=_env(lab_dir)).start()
        cars[host] = (svc, sock)
        st["sidecars"][host] = {"pid": svc.proc.pid, "socket": str(sock), "log": str(svc.log)}
    client = DaemonClient(addr, timeout=2.0)
    try:
        wait_for(client.status, 90, what=f"the lab daemon on {addr}")
    except TimeoutError as exc:
        raise LabError(f"{exc}\n{daemon.output()[-2000:]}") from None
    finally:
        client.close()
    for host, (svc, sock) in cars.items():
        try:
            wait_for(lambda s=sock, v=svc: s.exists() or not v.running(), 90,
                     what=f"the sidecar of {host}")
        except TimeoutError as exc:
            raise LabError(f"{exc}\n{svc.output()[-2000:]}") from None
        if not svc.running():
            raise LabError(f"the sidecar of {host} exited:\n{svc.output()[-2000:]}")


@contextlib.contextmanager
def session(lab_dir: Path, spec: LabSpec, **kw: Any) -> Iterator[dict[str, Any]]:
    """``up`` for the length of a ``with`` block, ``down`` however it ends."""
    st = up(lab_dir, spec, **kw)
    try:
        yield st
    finally:
        down(lab_dir)


def _describe(left: dict[str, list[str]]) -> str:
    return "; ".join(f"{k}: {', '.join(v[:6])}{' ...' if len(v) > 6 else ''}"
                     for k, v in left.items() if v)


def down(lab_dir: Path) -> str:
    """Remove the lab and anything with the lab prefix; return what was done, in words."""
    system.require_root()
    with state.locked(lab_dir):
        st = state.read(lab_dir)
        left = fabric.leftovers()
        if st is None and not any(left.values()):
            return f"no lab is up (no state in {lab_dir}, nothing named {PREFIX}*): nothing to do"
        counts = fabric.teardown(str(lab_dir))
        state.archive(lab_dir)
    remains = fabric.leftovers()
    if any(remains.values()):
        raise LabError(f"could not remove everything: {_describe(remains)}")
    what = ", ".join(f"{v} {k}" for k, v in counts.items())
    return (f"lab removed ({what})" + ("" if st else " (leftovers: there was no state file)")
            + (f"; its fault log is in {lab_dir / state.LAST_STATE_FILE}" if st else ""))


def require(lab_dir: Path) -> dict[str, Any]:
    st = state.read(lab_dir)
    if st is None:
        raise LabError(f"no lab is up (no state in {lab_dir}): run `c4 lab up` first")
    return st


# ----- jobs -----------------------------------------------------------------------------------
def start_job(lab_dir: Path, script: str | Path, args: list[str] = (), *, job: str | None = None,
              nproc: int | None = None, hosts: list[str] | None = None,
              env: dict[str, str] | None = None) -> tuple[str, list[Service]]:
    """Start a torchrun job with one node per lab host (gloo over the fabric, collectors on);
    return its name and the torchrun services (one per host, in host order)."""
    system.require_root()
    with state.locked(lab_dir):
        st = require(lab_dir)
        hosts = hosts or list(st["hosts"])
        nproc = nproc or st["spec"]["gpus_per_host"]
        if nproc > st["spec"]["gpus_per_host"]:
            raise LabError(f"--nproc {nproc} exceeds the {st['spec']['gpus_per_host']} GPUs per "
                           "host of this lab")
        n = len(st["jobs"])
        job = job or f"lab-{int(time.time())}-{n}"
        master = st["hosts"][hosts[0]]["addr"]
        port = 29500 + n % 1000
        st["jobs"].append({"job": job, "script": str(script), "hosts": hosts, "nproc": nproc,
                           "world_size": nproc * len(hosts), "started_at": time.time()})
        state.write(lab_dir, st)
    services = []
    for i, host in enumerate(hosts):
        h = st["hosts"][host]
        sidecar = st["sidecars"].get(host, {}).get("socket", str(lab_dir / host / "none.sock"))
        full_env = _env(lab_dir, {
            "C4_SIDECAR_SOCKET": sidecar, "C4_HOST": host, "C4_NIC": f"{host}/nic0",
            "C4_JOB": job, "GLOO_SOCKET_IFNAME": h["ifname"], "OMP_NUM_THREADS": "1",
            **(env or {})})
        full_env.pop("C4_GPU", None)  # set per rank by c4.lab.launch
        cmd = ["ip", "netns", "exec", h["ns"], sys.executable, "-m", "torch.distributed.run",
               "--nnodes", str(len(hosts)), "--nproc-per-node", str(nproc), "--node-rank",
               str(i), "--master-addr", master, "--master-port", str(port), "-m",
               "c4.lab.launch", str(script), *args]
        (lab_dir / host).mkdir(exist_ok=True)
        services.append(Service(cmd, lab_dir / host / f"{job}.log", env=full_env).start())
    return job, services


def stop_job(lab_dir: Path, job: str, services: list[Service], timeout: float = 10.0) -> None:
    """Stop a job started by ``start_job`` and every rank of it. torchrun starts each worker in
    a session of its own: a SIGKILL of torchrun's process group would leave the workers
    training on among themselves, so whatever of the job outlives its torchruns is killed."""
    from c4.lab.procs import kill_all, lab_processes

    for s in services:
        s.stop(timeout=timeout)
    kill_all([p.pid for p in lab_processes(str(lab_dir)) if p.env.get("C4_JOB") == job],
             timeout)


def wait_job(services: list[Service], timeout: float) -> int:
    """Wait for every node; on a failure or timeout stop the rest. Returns the worst exit code."""
    deadline = time.monotonic() + timeout
    try:
        while any(s.running() for s in services):
            if time.monotonic() > deadline:
                return 124
            if any(s.proc.poll() not in (None, 0) for s in services):
                time.sleep(5)  # let the others notice and exit on their own
                break
            time.sleep(0.2)
    finally:
        for s in services:
            s.stop(timeout=10)
    codes = [s.proc.returncode for s in services]
    return next((c for c in codes if c), 0)
