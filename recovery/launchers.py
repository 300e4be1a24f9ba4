"""How the supervisor starts one host's share of a job: the command and environment of one
torchrun node. The local launcher runs every host's torchrun on this machine (hosts are
labels, rendezvous on loopback); the fault lab's launcher (c4.lab.launch.LabLauncher) runs it
inside the host's network namespace, on its fabric address."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from c4.processes import REPO


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
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                           os.environ.get("PYTHONPATH")]))}
        return torchrun_command(spec, "127.0.0.1"), env


def torchrun_command(spec: NodeSpec, master_addr: str, python: str = sys.executable
                     ) -> list[str]:
    return [python, "-m", "torch.distributed.run", "--nnodes", str(spec.nnodes),
            "--nproc-per-node", str(spec.nproc_per_node), "--node-rank", str(spec.node_rank),
            "--master-addr", master_addr, "--master-port", str(spec.master_port),
            *spec.torchrun_options, *spec.script]
