"""NIC port states and counters (trace format version 2 ``port``): evidence that no timing gives.

A stuck transfer says which paths stopped, not which component on them died; at window
granularity a NIC, its cable and the GPU that feeds it are often equally likely. The port says
more: a port that went down names its NIC and cable; one whose error counters climb is suspect;
one that stays up and clean, reported by its node all along, is probably not what stopped the
traffic (a stalled sender is then likelier). The weights below reorder a hang's suspects by that
evidence; without port records nothing changes.

A NIC with several ports (cabled to several switches) reports as one: ``down`` once every port
is, and ``link_downed`` counting each port that went down. All of them down at once is the NIC
(its cables failing together is far less likely); one lost while the NIC stays up is that port's
cable, or the switch at its other end where that took other NICs' ports down with it: the NIC
still passes traffic on the others.
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
# ... and what one failure takes several ports down with (a NIC with several ports, every one
# of them down; a switch with ports of several NICs down): it comes before each cable
DOWN_ALL = 8.0


class PortBoard:
    """The latest state of every NIC port heard of, and whether its error counters grew."""

    def __init__(self, topology: TopologyLike | None = None) -> None:
        self.topology = topology
        self.up: dict[str, bool] = {}
        self.t_state: dict[str, int] = {}        # when the current state was first seen
        self.t_seen: dict[str, int] = {}
        self._first: dict[str, dict[str, int]] = {}
        self._last: dict[str, dict[str, int]] = {}
        self._ports: dict[str, int] = {}

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

    def ports(self, nic: str) -> int:
        """How many ports NIC ``nic`` has: its cables to switches in the topology (1 where
        the topology does not say)."""
        if nic not in self._ports:
            topo = self.topology
            n = sum(1 for lk in topo.links_of(nic) if "switch" in {
                topo.kind(e) for e in topo.endpoints(lk) if e != nic}) \
                if topo is not None and nic in topo else 0
            self._ports[nic] = max(n, 1)
        return self._ports[nic]

    def lost_port(self, nic: str) -> bool:
        """Whether NIC ``nic``, of several ports, lost one and stayed up."""
        first, last = self._first.get(nic, {}), self._last.get(nic, {})
        return bool(self.up.get(nic)) and self.ports(nic) > 1 \
            and last.get("link_downed", 0) > first.get("link_downed", 0)

    def evidence(self, nic: str) -> float:
        """The factor a NIC's port evidence puts on its odds (1: nothing known)."""
        if nic not in self.up:
            return 1.0
        if not self.up[nic]:
            return DOWN_ALL if self.ports(nic) > 1 else DOWN
        return ERRORS if self.errors_grew(nic) else CLEAN

    def _cable(self, nic: str) -> float:
        """The factor on a cable at NIC ``nic``: a port that went down takes its cable's
        signal with it, whether the NIC lost every port or this one."""
        if nic in self.up and (not self.up[nic] or self.lost_port(nic)):
            return DOWN
        return self.evidence(nic)

    def _factor(self, s: Suspect) -> float:
        topo = self.topology
        if s.type == "nic":
            return self.evidence(s.id)
        if s.type == "link" and "~" in s.id:
            ends = [n for n in s.id.split("~") if n in self.up]
            return max((self._cable(n) for n in ends), default=1.0)
        if s.type == "switch" and topo is not None and s.id in topo:
            # several ports cabled to it down at once: the switch (before each cable)
            down = sum(1 for n in topo.neighbors(s.id)
                       if self.up.get(n) is False or self.lost_port(n))
            return DOWN_ALL if down >= 2 else 1.0
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
        tiers = sorted({f for f in factors if f >= DOWN}, reverse=True)
        if tiers:
            # a port that went down is no likelihood: what it touches comes first (a NIC that
            # lost every port before its cables), each tier in its own order, and everything
            # else after, within half the top score
            rest = max(max(raw), 1e-12)
            width = 0.49 / len(tiers)
            for i, tier in enumerate(tiers):
                best = max(max(s.score for s, f in zip(suspects, factors, strict=True)
                               if f == tier), 1e-12)
                low = 1.0 - (i + 1) * width
                # (apart from the next tier's even where its best scored 0 here)
                raw = [(low + width * (0.02 + 0.96 * max(s.score / best, 0.0))
                        if f == tier else r)
                       for s, f, r in zip(suspects, factors, raw, strict=True)]
            raw = [r if f >= DOWN else 0.5 * r / rest
                   for f, r in zip(factors, raw, strict=True)]
        top = max(raw) or 1.0
        out = [replace(s, score=round(min(r / top, 1.0), 4))
               for s, r in zip(suspects, raw, strict=True)]
        order = sorted(range(len(out)), key=lambda i: (-out[i].score, i))
        out = [out[i] for i in order]
        down = [n for n in self.down()][:4]
        lost = [n for n in sorted(self.up) if self.lost_port(n)][:4]
        note = "; ".join(filter(None, (
            f"port down: {', '.join(down)}" if down else "",
            f"one port of several down: {', '.join(lost)}" if lost else ""))) \
            or "the ports on the stuck paths stayed up"
        return out, note
