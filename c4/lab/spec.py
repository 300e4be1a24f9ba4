"""What ``c4 lab up`` builds, declared once: each field carries its flag, help and range
(``c4.settings``); the command's options are derived from them. Apart from the layout (which
needs networkx) so that building the command stays cheap."""

from __future__ import annotations

from dataclasses import dataclass

from c4.lab.system import LabError
from c4.settings import at_least, from_to, setting, validate

MAX_HOSTS = 200


@dataclass(frozen=True)
class LabSpec:
    """What ``c4 lab up`` builds: hosts in groups of ``hosts_per_leaf`` under one leaf each,
    every leaf joined to every spine; link rates in Mbit/s."""

    hosts: int = setting(4, flag="--hosts", check=from_to(1, MAX_HOSTS),
                         help="Hosts (one network namespace each).")
    gpus_per_host: int = setting(2, flag="--gpus-per-host", check=at_least(1),
                                 help="GPUs (rank slots) per host.")
    hosts_per_leaf: int = setting(2, flag="--hosts-per-leaf", check=from_to(1, 63),
                                  help="Hosts under each leaf.")
    spines: int = setting(2, flag="--spines", check=from_to(1, 16),
                          help="Spine switches (ECMP paths between leaves).")
    # modest rates: on a small machine the CPU, not the shaper, limits faster links
    host_mbit: int = setting(400, flag="--host-mbit", check=at_least(1),
                             help="Host-leaf link rate, Mbit/s.")
    uplink_mbit: int = setting(400, flag="--uplink-mbit", check=at_least(1),
                               help="Leaf-spine link rate, Mbit/s.")

    def __post_init__(self) -> None:
        validate(self, LabError)

    @property
    def leaves(self) -> int:
        return -(-self.hosts // self.hosts_per_leaf)
