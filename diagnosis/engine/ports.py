"""NIC port states and counters (trace format version 2 ``port``): evidence that no timing gives.

A stuck transfer says which paths stopped, not which component on them died; at window
granularity a NIC, its cable and the GPU that feeds it are often equally likely. The port says
more: a port that went down names its NIC and cable; one whose error counters climb is suspect;
one that stays up and clean, reported by its node all along, is probably not what stopped the
traffic (a stalled sender is then likelier). The weights below reorder a hang's suspects by that
evidence; without port records nothing changes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from c4.report import Suspect
from c4.topology.protocol import TopologyLike
from diagnosis.engine.records import PortRecords

#: counters whose growth is a sign of a failing port or cable
ERROR_COUNTERS = ("link_downed", "symbol_errors", "rcv_errors", "xmit_discards")

# how much each kind of port evidence multiplies a suspect's odds. A cable that stops passing
# signal takes its port down, and a failing one shows errors; a NIC that dies mostly does the
# same. One up and clean all along is all but cleared: at window granularity its odds against
# a stalled sender are otherwise only how long it had been quiet, which says little.
DOWN, ERRORS, CLEAN = 4.0, 2.0, 0.02


class PortBoard:
    """The latest state of every NIC port heard of, and whether its error counters grew."""

    def __init__(self, topology: TopologyLike | None = None) -> None:
        self.topology = topology
        self.up: dict[str, bool] = {}
        self.t_state: dict[str, int] = {}        # when the current state was first seen
        self.t_seen: dict[str, int] = {}
        self._first: dict[str, dict[str, int]] = {}
        self._last: dict[str, dict[str, int]] = {}

    def __len__(self) -> int:
        return len(self.up)

    def add(self, recs: PortRecords) -> None:
        order = np.argsort(recs.t_ns, kind="stable")
        nics = np.asarray(recs.strings, dtype=object)[recs.nic[order]].tolist()
        ts, ups = recs.t_ns[order].tolist(), recs.up[order].tolist()
        counters = {k: v[order].tolist() for k, v in recs.counters.items()
                    if k in ERROR_COUNTERS}
        for i, (nic, t, up) in enumerate(zip(nics, ts, ups, strict=True)):
            if t < self.t_seen.get(nic, -1):
                continue
            self.t_seen[nic] = t
            if self.up.get(nic) != bool(up):
                self.up[nic] = bool(up)
                self.t_state[nic] = t
            for name, col in counters.items():
                if col[i] >= 0:
                    self._first.setdefault(nic, {}).setdefault(name, col[i])
                    self._last.setdefault(nic, {})[name] = col[i]

    def down(self) -> list[str]:
        return sorted(n for n, up in self.up.items() if not up)

    def errors_grew(self, nic: str) -> bool:
        first, last = self._first.get(nic, {}), self._last.get(nic, {})
        return any(last[k] > first[k] for k in last)

    def evidence(self, nic: str) -> float:
        """The factor a NIC's port evidence puts on its odds (1: nothing known)."""
        if nic not in self.up:
            return 1.0
        if not self.up[nic]:
            return DOWN
        return ERRORS if self.errors_grew(nic) else CLEAN

    def _factor(self, s: Suspect) -> float:
        topo = self.topology
        if s.type == "nic":
            return self.evidence(s.id)
        if s.type == "link" and "~" in s.id:
            ends = [n for n in s.id.split("~") if n in self.up]
            return max((self.evidence(n) for n in ends), default=1.0)
        if s.type == "switch" and topo is not None and s.id in topo:
            down = sum(1 for n in topo.neighbors(s.id) if self.up.get(n) is False)
            return DOWN if down >= 2 else 1.0
        return 1.0

    def weigh(self, suspects: list[Suspect]) -> tuple[list[Suspect], str]:
        """``suspects`` reordered by their port evidence (scores scaled so the top is 1), and
        a note saying what the ports showed ("" when they showed nothing)."""
        if not self.up or not suspects:
            return suspects, ""
        factors = [self._factor(s) for s in suspects]
        if all(f == 1.0 for f in factors):
            return suspects, ""
        raw = [s.score * f for s, f in zip(suspects, factors, strict=True)]
        if DOWN in factors:
            # a port that went down is no likelihood: what it touches comes first, in its own
            # order, and everything else after
            best = max(max(s.score for s, f in zip(suspects, factors, strict=True)
                           if f == DOWN), 1e-12)
            rest = max(max(raw), 1e-12)
            raw = [(max(s.score / best, 0.51) if f == DOWN else 0.5 * r / rest)
                   for s, f, r in zip(suspects, factors, raw, strict=True)]
        top = max(raw) or 1.0
        out = [replace(s, score=round(min(r / top, 1.0), 4))
               for s, r in zip(suspects, raw, strict=True)]
        order = sorted(range(len(out)), key=lambda i: (-out[i].score, i))
        out = [out[i] for i in order]
        down = [n for n in self.down()][:4]
        note = (f"port down: {', '.join(down)}" if down
                else "the ports on the stuck paths stayed up")
        return out, note
