"""Errors that may be a teardown: a launcher stopping a job on purpose (SIGTERM/SIGKILL of every
rank) ends the last calls with errors and stops the ranks at slightly different times, which looks
like ranks failing or going missing. Such an error report waits a grace period (the learnt hang
bound of its communicator, plus the time signs of life take to arrive) and is dropped when the
whole job went silent within the grace; it is filed as soon as the other ranks are heard more than
half the grace later (they kept running: one rank died; the ranks of a teardown stop well within
that).

A lone failure that leaves its peers waiting in the failed call (a rank errors and the job hangs
on it) is still filed when the job then goes silent: a teardown stops the waiters too and fails
calls on several ranks at once, so several error candidates close together are a teardown.

Hang reports are held too while the whole job looks stopped at once (``stopped_together``): a
SIGTERM to every rank interrupts the calls they are in (their collectors ship them as open rows)
and silences every rank within tens of ms, which reads as ranks that never arrived and as a call
everyone entered. A genuine hang stops its culprit first: it is out of any call (a rank that never
came), or it went silent well before the ranks that then blocked on it. A held hang is filed as
soon as a rank is heard again.
"""

from __future__ import annotations

import logging
from collections.abc import Set
from dataclasses import dataclass

import numpy as np

from diagnosis.engine.reporter import Finding

log = logging.getLogger(__name__)

_RECENT = 256     # candidate times kept to tell a teardown (several at once) from a lone failure
# Ranks stopped by one signal go silent within this of each other (tens of ms: delivery skew and
# the collectors' last flush); ranks that block one after the other on a hung one spread wider.
STOP_SPREAD_NS = 150_000_000


def stopped_together(seen: np.ndarray, waiting: set[int],
                     spread_ns: int = STOP_SPREAD_NS) -> bool:
    """Every rank heard from waits in a call and went silent within ``spread_ns`` of the others:
    a stop of the whole job (``seen``: last time each rank was heard, -1 never)."""
    heard = np.flatnonzero(seen >= 0)
    if len(heard) < 2 or len(waiting) < len(heard):
        return False
    last = seen[heard]
    if int(last.max() - last.min()) > spread_ns:
        return False
    return set(heard.tolist()) <= waiting


@dataclass
class _Held:
    report: Finding
    t: int                 # when the failure happened (or the rank went silent)
    grace: int
    culprits: np.ndarray
    blocked: bool          # members still wait in the failed call


class TeardownGate:
    def __init__(self, delay_ns: int = 0) -> None:
        self.delay_ns = delay_ns      # how late signs of life may arrive (see EngineConfig)
        self.held: dict[str, _Held] = {}
        self.recent: list[int] = []
        self.dropped: list[Finding] = []
        self._held_hangs: set[str] = set()

    def hold(self, report: Finding, t: int, grace: int, culprits: list[int],
             blocked: bool, replaces: str | None = None) -> None:
        """Hold ``report`` from time ``t``; ``replaces``: the id of a held report this one
        corrects (the same failure, told better), which it takes the place of."""
        old = self.held.get(report.key)
        prev = self.held.pop(replaces, None) if replaces is not None else None
        if prev is not None:
            t = min(t, prev.t)
        self.held[report.key] = _Held(report, t if old is None else min(old.t, t), int(grace),
                                     np.asarray(culprits, dtype=np.int64), blocked)
        if prev is None and replaces is None:
            # (a correction is the same failure told better, not another one close to it)
            self.recent.append(int(t))
            del self.recent[:-_RECENT]

    def hold_hang(self, report: Finding) -> None:
        """A hang report while the whole job looks stopped at once: kept aside (not filed) for
        as long as it does; the caller files it once a rank is heard again."""
        if report.key not in self._held_hangs:
            log.info("held %s: every rank went silent at once inside a call (a stop of the "
                     "whole job)", report.key)
            self.dropped.append(report)
            del self.dropped[:-_RECENT]
        self._held_hangs.add(report.key)

    def withdraw(self, fid: str) -> bool:
        """Forget a held report; False if it is not held (filed or dropped already)."""
        return self.held.pop(fid, None) is not None

    def holds_silence(self) -> bool:
        """Whether a held report is a rank's silence ("stopped reporting")."""
        return any(h.report.stopped_reporting for h in self.held.values())

    def settle(self, seen: np.ndarray, now: int, final: bool = False,
               awaited: Set[int] = frozenset()) -> list[Finding]:
        """Findings to file now; teardown ones are dropped. ``seen``: last time each rank was
        heard (-1 never); ``final``: the data has ended, decide every held report.
        ``awaited``: ranks absent from a call others wait in; a rank's silence is held while
        it is (it is a hang, filed once the wait is long enough to be sure, which withdraws
        it: one frozen process is one incident), or until the wait ends."""
        out: list[Finding] = []
        if not self.held:
            return out
        times = np.asarray(self.recent, dtype=np.int64)
        for fid in list(self.held):
            h = self.held[fid]
            if h.report.stopped_reporting and not final and len(h.culprits) \
                    and set(h.culprits.tolist()) <= awaited:
                continue
            others = seen.copy()
            others[h.culprits[h.culprits < len(seen)]] = -1
            last = int(others.max()) if len(others) else -1
            if last > h.t + h.grace // 2:
                # the job kept running for longer than a teardown's spread (well within one
                # bound): a rank really failed
                out.append(h.report)
            elif final or now >= h.t + h.grace + self.delay_ns:
                # (not before the signs of life of that time had time to arrive)
                together = int((np.abs(times - h.t) <= h.grace).sum())
                if h.blocked and together < 2:
                    out.append(h.report)        # a lone failure the job hangs on
                else:
                    log.info("dropped %s: the whole job went silent within %.1f s of it "
                             "(a teardown)", fid, h.grace / 1e9)
                    self.dropped.append(h.report)
                    del self.dropped[:-_RECENT]
            else:
                continue
            del self.held[fid]
        return out
