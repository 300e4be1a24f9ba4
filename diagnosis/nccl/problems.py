"""Bad input that a reader skips: each kind warned about with its file and line, then counted.

NCCL's telemetry is written by processes that die mid-line, rotated under the reader, and
printed by versions that disagree on spellings. A reader never stops at such input: it skips
what it cannot read, warns once per (file, kind) with the file and line of the first case, and
keeps counts, so that what was lost is known (``Problems.summary``).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Problem:
    """One piece of bad input: where it was and what is wrong with it."""

    source: str
    line: int | None
    kind: str
    message: str

    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source


@dataclass
class Problems:
    """Collects the problems of a read; warns about the first of each kind in each file (of
    the kinds in ``once``, the first in any file), counts every one."""

    #: problems kept in full (the first ones); the rest are only counted
    keep: int = 200
    #: kinds that are normal output of some NCCL versions rather than damage (``"nan"``
    #: bandwidths of calls too short to time): warned about once per read, not per file
    once: frozenset[str] = frozenset({"nan"})
    seen: list[Problem] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    _warned: set[tuple[str, str]] = field(default_factory=set)
    logger: logging.Logger = log

    def add(self, source: str, line: int | None, kind: str, message: str) -> None:
        """Note a problem; the first of its kind in ``source`` is logged as a warning."""
        p = Problem(source, line, kind, message)
        self.counts[kind] += 1
        if len(self.seen) < self.keep:
            self.seen.append(p)
        key = ("", kind) if kind in self.once else (source, kind)
        if key not in self._warned:
            self._warned.add(key)
            self.logger.warning("%s: %s", p.where(), message)

    def merge(self, other: Problems) -> None:
        """Take the problems another reader collected (a worker process's), warned already."""
        self.counts.update(other.counts)
        self.seen.extend(other.seen[: max(0, self.keep - len(self.seen))])
        self._warned |= other._warned

    def __len__(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> dict[str, int]:
        """Problems by kind."""
        return dict(self.counts)
