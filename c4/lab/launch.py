"""Run a training script as one rank of a lab job: ``torchrun ... -m c4.lab.launch SCRIPT ARGS``.

torchrun gives every worker of a node the same environment; this sets the rank's topology GPU
id (``C4_GPU`` = host id + ``/gpu`` + local rank) before the script and its collectors start.
``LabLauncher`` lets the recovery supervisor (``c4 launch``) start and restart jobs on lab
hosts: each host's torchrun runs in its namespace and talks gloo over its fabric interface."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import Any

from recovery.launchers import NodeSpec, torchrun_command


class LabLauncher:
    """A recovery.launchers.Launcher for the hosts of the lab in ``lab_dir``."""

    def __init__(self, lab_dir: Path) -> None:
        from c4.lab import lab

        self.lab_dir = Path(lab_dir)
        self._state: dict[str, Any] = lab.require(self.lab_dir)

    def node(self, spec: NodeSpec) -> tuple[list[str], dict[str, str]]:
        from c4.lab import lab

        hosts = self._state["hosts"]
        if spec.host not in hosts:
            from c4.lab.system import LabError

            raise LabError(f"{spec.host} is not a host of the lab in {self.lab_dir}")
        h = hosts[spec.host]
        sidecar = self._state["sidecars"].get(spec.host, {}).get("socket")
        env = lab._env(self.lab_dir, {"C4_NIC": f"{spec.host}/nic0",
                                      "GLOO_SOCKET_IFNAME": h["ifname"]})
        if sidecar:
            env["C4_SIDECAR_SOCKET"] = sidecar
        wrapped = NodeSpec(**{**spec.__dict__,
                              "script": ["-m", "c4.lab.launch", *spec.script]})
        cmd = ["ip", "netns", "exec", h["ns"],
               *torchrun_command(wrapped, hosts[spec.master_host]["addr"])]
        return cmd, env


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m c4.lab.launch SCRIPT [ARGS...]")
    host, local = os.environ.get("C4_HOST"), os.environ.get("LOCAL_RANK")
    if host and local is not None and not os.environ.get("C4_GPU"):
        os.environ["C4_GPU"] = f"{host}/gpu{local}"
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
