"""Discovery on the node: run what the host has (``nvidia-smi topo -m``, ``ibdev2netdev``,
``lldpctl -f json``) and read sysfs, and say what the host is made of (:class:`HostInternals`).

Commands go through an injectable runner, so that the sidecar can call :func:`discover_host`
with its own (time limits, privileges) and tests with recorded outputs. A tool that is missing
or fails is noted in the result's issues and the rest goes on: a host without lldpd still has
its GPU-NIC pairing, one without ``ibdev2netdev`` has sysfs."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from c4.errors import C4Error
from c4.topology.host_internals import HostInternals, assemble
from c4.topology.importers import ibdev2netdev, lldp, nvidia_smi
from c4.topology.importers.common import INFO, WARNING, Issue
from c4.topology.model import TopologyError
from c4.topology.sysfs import read_devices

log = logging.getLogger(__name__)

#: runs a command and returns its standard output, or None when the command is not there or
#: fails (the runner decides about time limits)
Runner = Callable[[Sequence[str]], "str | None"]

NVIDIA_SMI = ("nvidia-smi", "topo", "-m")
IBDEV2NETDEV = ("ibdev2netdev",)
LLDPCTL = ("lldpctl", "-f", "json")
COMMANDS = (NVIDIA_SMI, IBDEV2NETDEV, LLDPCTL)
#: the file each command's output is read from by :func:`recorded_runner`
RECORDED = {NVIDIA_SMI: "nvidia-smi.txt", IBDEV2NETDEV: "ibdev2netdev.txt",
            LLDPCTL: "lldpctl.json"}
T = TypeVar("T")


def run_command(argv: Sequence[str], timeout_s: float = 20.0) -> str | None:
    """The default runner: the command's stdout, or None if it is not installed, fails or
    outlives ``timeout_s``."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.info("%s: %s", " ".join(argv), exc)
        return None
    if proc.returncode != 0:
        log.info("%s exited %d: %s", " ".join(argv), proc.returncode, proc.stderr.strip()[:200])
        return None
    return proc.stdout


def recorded_runner(directory: str | Path) -> Runner:
    """A runner that answers each command with the output saved in ``directory`` (named as in
    :data:`RECORDED`; a missing file is a missing tool): discovery from outputs gathered
    elsewhere, e.g. by a privileged job, and tests on recorded outputs."""
    base = Path(directory)
    if not base.is_dir():
        raise TopologyError(f"{base} is not a directory of recorded tool outputs (expected "
                             f"{', '.join(RECORDED.values())})")

    def run(argv: Sequence[str]) -> str | None:
        name = RECORDED.get(tuple(argv))
        if name is None:
            return None
        try:
            return (base / name).read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("cannot read recorded output %s: %s", base / name, exc)
            return None
    return run


def discover_host(runner: Runner, sysfs_root: str | Path = "/sys", *,
                  hostname: str | None = None) -> HostInternals:
    """What this host is made of, from whatever of its tools and sysfs answer. ``hostname``:
    the host's id in the topology (default: the machine's short hostname)."""
    host = hostname or socket.gethostname().split(".")[0]
    issues: list[Issue] = []
    sources: list[str] = []

    def ask(argv: Sequence[str], parse: Callable[[str, str], T]) -> T | None:
        name = " ".join(argv)
        try:
            text = runner(argv)
        except Exception as exc:   # a runner is caller code: its failure is one missing tool
            log.warning("runner failed on %s: %s", name, exc)
            text = None
        if not text or not text.strip():
            issues.append(Issue(INFO, f"{name}: not available"))
            return None
        try:
            result = parse(text.replace("\r\n", "\n"), name)
        except C4Error as exc:
            issues.append(Issue(WARNING, f"{name}: unreadable output ({exc})"))
            return None
        sources.append(name)
        return result

    matrix = ask(NVIDIA_SMI, nvidia_smi.parse)
    ports = ask(IBDEV2NETDEV, ibdev2netdev.parse)
    neighbors = ask(LLDPCTL, lldp.parse)
    devices = read_devices(sysfs_root)
    if devices:
        sources.append(f"sysfs:{Path(sysfs_root) / 'class' / 'infiniband'}")
    else:
        issues.append(Issue(INFO, f"no RDMA devices under {Path(sysfs_root)}/class/infiniband"))
    hi = assemble(host, matrix, ports, neighbors, devices, sources)
    hi.issues[:0] = issues
    return hi
