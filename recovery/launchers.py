"""How the supervisor starts one host's share of a job: the command and environment of one
torchrun node. The local launcher runs every host's torchrun on this machine (hosts are
labels, rendezvous on loopback); the fault lab's launcher (c4.lab.launch.LabLauncher) runs it
inside the host's network namespace, on its fabric address."""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

#: The folder that holds c4's top-level packages (recovery, c4, collectors, ...): an
#: interpreter's site-packages when c4 is installed, the checkout when it runs from source.
PACKAGES_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class NodeSpec:
    """One torchrun node of one attempt of a job."""

    host: str
    node_rank: int
    nnodes: int
    nproc_per_node: int
    master_host: str     # the host of node rank 0
    master_port: int
    torchrun_options: Sequence[str]
    script: Sequence[str]  # the training script and its arguments


class Launcher(Protocol):
    def node(self, spec: NodeSpec) -> tuple[list[str], dict[str, str]]:
        """The command line and the extra environment that start ``spec``'s torchrun."""
        ...


class LocalLauncher:
    """Every host's torchrun on this machine; the rendezvous is on 127.0.0.1."""

    def node(self, spec: NodeSpec) -> tuple[list[str], dict[str, str]]:
        return torchrun_command(spec, "127.0.0.1"), python_path_env()


def torchrun_command(spec: NodeSpec, master_addr: str, python: str = sys.executable
                     ) -> list[str]:
    return [python, "-m", "torch.distributed.run", "--nnodes", str(spec.nnodes),
            "--nproc-per-node", str(spec.nproc_per_node), "--node-rank", str(spec.node_rank),
            "--master-addr", master_addr, "--master-port", str(spec.master_port),
            *spec.torchrun_options, *spec.script]


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
    if PACKAGES_ROOT in _site_dirs():
        return {}
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGES_ROOT),
                                                        environ.get("PYTHONPATH")]))}
