"""The isolation contract: take a node out of service, return it, and have a job restarted
without it. The backends (``blocklist``, a local file, the default; ``slurm``;
``kubernetes``) are registered in ``recovery.isolation.registry``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping

#: Prefix of every reason c4 writes, so operators see who isolated a node and why.
REASON_PREFIX = "c4:"


class Isolator(ABC):
    """A way to isolate nodes. Every method is idempotent: isolating an isolated node or
    releasing a free one changes nothing (the controller checks ``isolated()`` before acting,
    and may ask again after it restarts)."""

    #: Short backend name recorded with each recovery.
    name: str = ""

    @abstractmethod
    def isolate(self, node: str, reason: str) -> None:
        """Keep new work off ``node`` (drain, cordon, block), recording ``reason``."""

    @abstractmethod
    def release(self, node: str) -> None:
        """Return a repaired node to service."""

    @abstractmethod
    def isolated(self) -> Mapping[str, str]:
        """Nodes currently isolated, with the reason given."""

    @abstractmethod
    def restart(self, job: str, exclude: Collection[str]) -> str:
        """Have ``job`` stopped and started again on nodes other than ``exclude``; returns a
        note for the journal. Backends whose jobs restart by themselves once a node is
        isolated (the blocklist, watched by ``c4 launch``) only say so."""

