"""How the supervisor starts one host's share of a job: the command and environment of one
torchrun node. The local launcher runs every host's torchrun on this machine (hosts are
labels, rendezvous on loopback); launchers for other places are registered by name by the layer
above (``c4.cli`` registers the fault lab's, which runs each host inside its network namespace
on its fabric address), so that recovery never imports them."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from c4.processes import REPO
from recovery.errors import LaunchError


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


#: makes a launcher for the place (a directory that describes its hosts) it is given
LauncherFactory = Callable[[Path], Launcher]
_FACTORIES: dict[str, LauncherFactory] = {}


def register_launcher(name: str, factory: LauncherFactory) -> None:
    """Make ``make_launcher(name, where)`` call ``factory(where)``; a second call replaces it."""
    _FACTORIES[name] = factory


def make_launcher(name: str, where: Path) -> Launcher:
    """The registered launcher ``name`` for ``where``; :class:`LaunchError` if none is."""
    factory = _FACTORIES.get(name)
    if factory is None:
        known = ", ".join(sorted(_FACTORIES)) or "none"
        raise LaunchError(f"no {name!r} launcher is registered (registered: {known}); run the "
                          "job through the `c4` command, which registers the lab's")
    return factory(where)
