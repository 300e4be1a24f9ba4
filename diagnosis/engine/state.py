"""The engine's state stage, as the detectors and report builders read it: per-communicator
timing, connection windows, progress, the ranks' own clocks and placement, and the names the
records intern. The engine feeds it; nothing downstream writes to it but the detectors' own
learnt state (timing's stall bookkeeping)."""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.owntime import OwnClock
from diagnosis.engine.placement import Placement
from diagnosis.engine.ports import PortBoard
from diagnosis.engine.progress import ProgressBoard
from diagnosis.engine.timing import GroupTiming
from diagnosis.engine.wording import group_words


@dataclass(frozen=True)
class JobState:
    cfg: EngineConfig
    arena: Arena
    placement: Placement
    clock: OwnClock
    timing: GroupTiming
    conns: ConnWindow
    progress: ProgressBoard
    ports: PortBoard
    pg_names: list[str]      # interned communicator names (grow as records arrive)
    op_names: list[str]      # interned op names
    leaving: set[int]        # ranks whose collectors said their process is exiting

    def label(self, g: int) -> str:
        """How a communicator or send/recv channel is named to the user."""
        name = self.arena.names[g]
        return group_words(name) if not self.arena.p2p[g] else f"send/recv {name}"

    def pg_of(self, g: int) -> str:
        """The communicator name of communicator or channel ``g``."""
        return self.pg_names[self.arena.pg_of[g]]

    def op_name(self, op: int) -> str:
        return self.op_names[op] if 0 <= op < len(self.op_names) else "call"
