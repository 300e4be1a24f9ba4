"""Reports of slowness: a rank or host whose own time grew (``noncomm_slow``), and connections or
communicators whose transfers slowed, localized to network components (``comm_slow``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4.report import Suspect
from diagnosis.engine.localize import CommFinding
from diagnosis.engine.lossy import PREFIX as LOSSY_PREFIX
from diagnosis.engine.reporter import Finding, Reporter
from diagnosis.engine.slow import SlowRank
from diagnosis.engine.state import JobState
from diagnosis.engine.wording import group_words, ms

#: host-mates found slow beside a GPU with over this many times their excess are its
#: side effect (see ``SlowReports.noncomm``)
_ALIKE = 0.25
#: how much earlier than a slow component's report a group may seem to fall behind and still
#: be its symptom: a pace's bucket spans a few iterations, and its onset is the bucket's start
#: (at least this; a bucket's span where that is longer: seconds at K = 64, tens at K = 256)
_ONSET_SLACK_NS = 4_000_000_000


@dataclass(frozen=True)
class _Named:
    """A component (or a connection's end) that open ``comm_slow`` reports name: how much they
    slowed its traffic at most, and since when."""

    slowdown: float
    onset_ns: int


def _evidence(found: Iterable[SlowRank]) -> float:
    """The log p-value of findings pooled as independent evidence: each member's own test once,
    and a test of a group's pace as a whole (``SlowRank.whole_group``) once for the group,
    not once per member."""
    own = 0.0
    groups: dict[int, float] = {}
    for s in found:
        if s.whole_group:
            groups[s.group] = min(groups.get(s.group, 0.0), s.logp)
        else:
            own += s.logp
    return own + sum(groups.values())


def _waited(s: SlowRank) -> str:
    """What the progress snapshots of a rank its peers wait for showed (``waits``)."""
    assert s.waits is not None
    hits, count, snaps = s.waits
    return (f"of the {snaps} progress snapshots since it began, its peers were inside a call "
            f"in {count}, and in {hits} of those it had not entered it and waited in no other "
            f"call: about {100 * hits / max(snaps, 1):.0f}% of the time they waited for it")


class SlowReports:
    """Turns the slow detectors' findings into ``noncomm_slow`` and ``comm_slow`` findings for
    the reporter, and says which of its open ones ended. ``blamed``: ranks that error reports
    blame (read, not written)."""

    def __init__(self, state: JobState, reporter: Reporter, blamed: Set[int]) -> None:
        self.cfg, self.arena, self.placement = state.cfg, state.arena, state.placement
        self.reporter, self.pg_names, self.error_ranks = reporter, state.pg_names, blamed
        self._pending: set[str] = set()    # thin comm_slow findings seen in the last pass
        self._unseen: dict[str, int] = {}   # open noncomm_slow id -> passes since last found
        # noncomm_slow host findings of the last pass, with the most samples one of their
        # ranks' findings rested on
        self._hosts: dict[str, int] = {}
        self._sample = 1     # the stream's sampling factor as of the last pass
        self._filed: dict[int, SlowRank] = {}   # rank -> the finding of its last rank report

    def noncomm(self, found: list[SlowRank], now: int, sample: int = 1,
                confirm: bool = True) -> None:
        """``sample``: the stream's sampling factor (above 1, a rank's lateness includes its
        own transfers). ``confirm``: a regular pass, whose misses count towards withdrawing
        an unconfirmed report (an extra pass between two, to judge a ring before it
        overflows, only adds)."""
        self._sample = sample
        best: dict[int, SlowRank] = {}
        named = self._network_named() if self._sample > 1 else {}
        for s in found:
            if s.rank in self.error_ranks or self._symptom(s, named) is not None:
                continue
            cur = best.get(s.rank)
            if cur is None or s.logp < cur.logp:      # its strongest evidence
                best[s.rank] = s
        by_host: dict[str | None, list[int]] = {}
        for r in best:
            by_host.setdefault(self.placement.host(r), []).append(r)
        self._add_reported_mates(by_host, best)
        for host, ranks in by_host.items():
            # a slow host slows its GPUs alike; a GPU many times slower than its host-mates
            # found beside it is the fault, and their small excess its side effect (it takes
            # their CPU, or their share of the host's links)
            top = max(best[r].excess for r in ranks)
            by_host[host] = [r for r in ranks if best[r].excess >= _ALIKE * top]
        strong = np.log(self.cfg.slow_alpha)
        filed: set[str] = set()
        hosts: dict[str, int] = {}
        for host, ranks in by_host.items():
            members = self.placement.ranks_of_host(host) if host else []
            pooled = sum(best[r].logp for r in ranks)
            if host and len(ranks) >= 2 and len(members) >= 2 and pooled < strong and \
                    len(ranks) >= self.cfg.host_fraction * len(members):
                fid = f"noncomm_slow:host:{host}"
                hosts[fid] = max(best[r].samples for r in ranks)
                lasting = all(best[r].duty is None for r in ranks)
                if _evidence(best[r] for r in ranks) >= strong \
                        and not self._confirmed(fid, hosts[fid] if lasting else None):
                    continue        # thin: wait for more samples (see _confirmed)
                filed.add(self._slow_host(host, sorted(ranks), best, now))
            else:
                for r in ranks:
                    if best[r].logp < strong:
                        filed.add(self._slow_rank(best[r], now))
        if confirm:
            self._hosts = hosts
            self._withdraw_unconfirmed(filed, now)

    def _add_reported_mates(self, by_host: dict[str | None, list[int]],
                            best: dict[int, SlowRank]) -> None:
        """Add to each host found now its GPUs reported slow at earlier passes and still open
        (with the finding that filed them). A slow host's GPUs cross the threshold one pass
        apart as often as together (in the lab, CPU contention on a host of two: one GPU's
        report, then its host-mate's, never both at one pass); the host is what they share."""
        for host, ranks in by_host.items():
            if host is None:
                continue
            for r in self.placement.ranks_of_host(host):
                s = self._filed.get(r)
                if r in best or s is None:
                    continue
                cur = self.reporter.get(f"noncomm_slow:rank:{r}")
                if cur is not None and cur.state == "open":
                    best[r] = s
                    ranks.append(r)

    def _confirmed(self, fid: str, samples: int | None) -> bool:
        """Whether a host finding whose evidence is thin once counted right (``_evidence``) is
        confirmed: found at the last pass too, or already reported. One test of a group's pace
        stands for all its members: a chance split of its buckets (the mix of work that its
        few kept calls happen to span) is as strong as a real slowdown for one bucket and gone
        at the next; a slow host is found again, as thin comm_slow observations are
        (``comm``). A change point (``samples``: the buckets since it) is found again only on
        more of them: a pass that saw no new bucket (such as the one that ends a trace, which
        writes the buckets still open) judges the same ones. (Episodes are counted from the
        first strong one, which a new bucket may move.)"""
        cur = self.reporter.get(fid)
        if cur is not None and cur.state == "open":
            return True
        if fid not in self._hosts:
            return False
        return samples is None or self._hosts[fid] < samples

    def _withdraw_unconfirmed(self, filed: set[str], now: int) -> None:
        """A slow rank or host that later passes, judging more samples, no longer find: its
        finding was a chance split of its samples (a GPU a few percent slower all along meets
        the start-up of the period learner), not a change. A real fault, intermittent too,
        is found again at every pass; after ``slow_unconfirmed_passes`` without it, the report
        is withdrawn."""
        for fid in self.reporter.open_ids("noncomm_slow"):
            if fid in filed:
                self._unseen.pop(fid, None)
                continue
            self._unseen[fid] = self._unseen.get(fid, 0) + 1
            if self._unseen[fid] >= self.cfg.slow_unconfirmed_passes:
                del self._unseen[fid]
                self.reporter.resolve(fid, now, "later passes over more samples no longer "
                                      "find it slow")

    def _slow_rank(self, s: SlowRank, now: int) -> str:
        fid = f"noncomm_slow:rank:{s.rank}"
        host = self.placement.host(s.rank)
        hid = f"noncomm_slow:host:{host}"
        if host and self.reporter.get(hid) is not None:
            return hid
        name = self.arena.names[s.group]
        if s.waits is not None:
            summary = (f"{self.placement.describe(s.rank)} keeps its peers in "
                       f"{group_words(name, 'group')} waiting: {_waited(s)}: check that GPU "
                       "(clocks, thermals, ECC) or its host's load")
        elif s.duty is not None:
            every = f", one every {s.every_ns / 1e9:.1f} s" if s.every_ns > 0 else ""
            summary = (f"{self.placement.describe(s.rank)} is slow again and again: in "
                       f"{s.episodes} episodes, {100 * s.duty:.0f}% of its {s.samples} samples "
                       f"since the first{every}, it takes {ms(s.excess_ns)} "
                       f"({1 + s.excess:.1f}x) longer than its peers in "
                       f"{group_words(name, 'group')} outside collectives, normal between: "
                       "check that GPU (throttling: clocks, thermals, power) or what its host "
                       "runs now and then")
        else:
            summary = (f"{self.placement.describe(s.rank)} spends {ms(s.excess_ns)} "
                       f"({100 * s.excess:.0f}%) longer than its peers in "
                       f"{group_words(name, 'group')} outside "
                       f"collectives and arrives late in {100 * s.frac:.0f}% of {s.samples} "
                       "calls: check that GPU (clocks, thermals, ECC) or its host's load")
        self.reporter.file(Finding(
            "noncomm_slow", fid, (self.placement.suspect(s.rank, s.frac),), s.onset_ns,
            summary, pg=self.pg_names[self.arena.pg_of[s.group]],
            evidence=self._slow_evidence(s), ranks=(s.rank,), recurring=s.duty is not None),
            now)
        self._filed[s.rank] = s
        return fid

    def _slow_host(self, host: str, ranks: list[int], best: dict[int, SlowRank],
                   now: int) -> str:
        fid = f"noncomm_slow:host:{host}"
        rows = [best[r] for r in ranks]
        excess = float(np.median([s.excess for s in rows]))
        excess_ns = float(np.median([s.excess_ns for s in rows]))
        frac = float(np.median([s.frac for s in rows]))
        onset = min(s.onset_ns for s in rows)
        duty = [s.duty for s in rows if s.duty is not None]
        waited = [s for s in rows if s.waits is not None]
        if len(waited) * 2 > len(rows):
            summary = (f"every GPU of host {host} ({len(ranks)} ranks) keeps its peers "
                       f"waiting: {_waited(waited[0])} (rank {waited[0].rank}; "
                       f"{len(waited)} of its ranks alike): check the host (CPU, memory, PCIe, "
                       "power)")
        elif len(duty) * 2 > len(rows):
            summary = (f"every GPU of host {host} ({len(ranks)} ranks) is slow again and "
                       f"again: in {100 * float(np.median(duty)):.0f}% of their samples since "
                       f"the first episode they take {ms(excess_ns)} ({1 + excess:.1f}x) "
                       "longer than their peers outside collectives, normal between: check "
                       "the host (CPU, memory, PCIe, power; what it runs now and then)")
        else:
            summary = (f"every GPU of host {host} ({len(ranks)} ranks) spends {ms(excess_ns)} "
                       f"({100 * excess:.0f}%) longer than its peers outside collectives: "
                       "check the host (CPU, memory, PCIe, power)")
        suspects = [Suspect("host", host, frac)] + [self.placement.suspect(r, frac / 2)
                                                    for r in ranks[:2]]
        self.reporter.file(Finding(
            "noncomm_slow", fid, tuple(suspects), onset, summary,
            pg=self.pg_names[self.arena.pg_of[rows[0].group]],
            evidence={"ranks": ranks, **self._slow_evidence(rows[0])}, ranks=tuple(ranks),
            recurring=rows[0].duty is not None), now)
        for r in ranks:
            self.reporter.resolve(f"noncomm_slow:rank:{r}", now, f"part of slow host {host}")
        return fid

    def _slow_evidence(self, s: SlowRank) -> dict[str, Any]:
        out = {"group": self.arena.names[s.group], "median_excess": round(s.excess, 4),
               "median_excess_ms": round(s.excess_ns / 1e6, 3), "samples": s.samples,
               "late_fraction": round(s.frac, 3), "noise_sigma": round(s.sigma, 4)}
        if s.duty is not None:
            out.update(recurring=True, slow_fraction=round(s.duty, 3), episodes=s.episodes)
        if s.waits is not None:
            out.update(waited_snapshots=s.waits[0], waiting_snapshots=s.waits[1],
                       snapshots=s.waits[2])
        return out

    def _slow_ranks(self) -> set[int]:
        """Ranks with an open ``noncomm_slow`` report (their own, or their host's); with
        sampled calls, not those found only slow again and again (see ``_symptoms``)."""
        out: set[int] = set()
        for _, f in self.reporter.open_findings("noncomm_slow"):
            if self._sample > 1 and f.recurring:
                continue
            out.update(f.ranks)
        return out

    def _network_named(self) -> dict[str, _Named]:
        """The components that open ``comm_slow`` reports name first (with their top score),
        and ``rank:R`` for the ends of the connections they list as slow: per id, the most a
        report naming it slowed its traffic, and the earliest onset."""
        named: dict[str, _Named] = {}

        def add(key: str, slowdown: float, onset: int) -> None:
            cur = named.get(key)
            named[key] = _Named(slowdown, onset) if cur is None else \
                _Named(max(cur.slowdown, slowdown), min(cur.onset_ns, onset))
        for _, f in self.reporter.open_findings("comm_slow"):
            top = f.suspects[0].score if f.suspects else 0
            slowdown = float(f.evidence.get("slowdown", 1.0))
            keys = [x.id for x in f.suspects if x.score >= top]
            if f.via == "connections":
                keys += [f"rank:{r}" for name in f.connections for r in name.split(">")]
            for key in keys:
                add(key, slowdown, f.onset_ns)
        return named

    def _behind(self, rank: int, named: Mapping[str, _Named]) -> str | None:
        """The named component that is the rank's NIC, its cable or its leaf, or one of the
        slow connections it is an end of, if any (its id in ``named``)."""
        if f"rank:{rank}" in named:
            return f"rank:{rank}"
        nic = self.placement.nic(int(rank))
        if nic is None or not named:
            return None
        edge = {nic}
        topo = self.placement.topology
        if topo is not None and nic in topo:
            for lk in topo.links_of(nic):
                edge.add(lk)
                edge.update(lk.split("~"))
        hit = sorted(edge & named.keys())
        return hit[0] if hit else None

    def _symptom(self, s: SlowRank, named: Mapping[str, _Named]) -> str | None:
        """With sampled calls a rank's lateness includes its own transfers (its own time
        outside calls is lost): a rank behind a slow NIC or leaf arrives late now and then, at
        the calls that follow its slow sends. A rank found slow only again and again whose NIC,
        its cable or its leaf is named slow, or whose connections are, is that fault's
        symptom: the component. So is a group found behind its replicas from a change point
        on (``whole_group``) with a member behind such a component, from its onset on, by no
        more than that component slowed its traffic: the group's spans between kept calls run
        over its own transfers too (with one call in 64 kept, over a few hundred calls), so
        they lengthen by up to that much where its transfers slow, and a host computing
        slower by more is no symptom."""
        if self._sample == 1:
            return None
        if s.duty is not None:
            return self._behind(s.rank, named)
        if not s.whole_group:
            return None
        for r in self.arena.members[s.group].tolist():
            hit = self._behind(r, named)
            if hit is not None and s.excess <= named[hit].slowdown - 1.0 \
                    and s.onset_ns >= named[hit].onset_ns - max(_ONSET_SLACK_NS, s.every_ns):
                return hit
        return None

    def _symptoms(self, now: int) -> None:
        """Withdraw the recurring slow ranks that the comm reports now explain (see
        ``_symptom``)."""
        if self._sample == 1:
            return
        named = self._network_named()
        for fid, f in self.reporter.open_findings("noncomm_slow"):
            if not f.recurring:
                continue
            for r in f.ranks:
                hit = self._behind(int(r), named)
                if hit is not None:
                    where = f"its connection to or from rank {r}" if hit.startswith("rank:") \
                        else hit
                    self.reporter.resolve(fid, now, f"its lateness follows its transfers: "
                                          f"{where} is slow")
                    break

    def comm(self, findings: list[CommFinding], now: int) -> None:
        """Call after ``noncomm`` of the same pass."""
        current: set[str] = set()
        pending: set[str] = set()
        slow_ranks = self._slow_ranks()
        for f in findings:
            comps = f.explanation.components
            # a slow GPU (or host) is slow at its transfers too (its kernels or, with gloo,
            # its CPU move the data): traffic that is slow only where it touches one is its
            # symptom, already reported
            fid = f"comm_slow:{comps[0].type}:{comps[0].id}" if comps else ""
            if f.ends and all(e & slow_ranks for e in f.ends):
                culprits = sorted(set().union(*f.ends) & slow_ranks)
                self.reporter.resolve(fid, now, f"explained by slow rank(s) {culprits}")
                continue
            # one slow observation explained only by ECMP alternatives (components on some of
            # its candidate paths, never surely crossed by healthy traffic): the first sign of
            # a fault elsewhere on its path as often as of a slow uplink; wait one more pass
            cur = self.reporter.get(fid)
            if not f.sure and len(f.observations) == 1 and fid not in self._pending \
                    and (cur is None or cur.state != "open"):
                pending.add(fid)
                continue
            pending.add(fid)
            suspects = []
            for c in comps:
                if c.type == "rank":
                    suspects.append(self.placement.suspect(int(c.id), f.explanation.score))
                else:
                    suspects.append(Suspect(c.type, c.id, min(max(f.explanation.score, 0), 1)))
            top = suspects[0]
            fid = f"comm_slow:{top.type}:{top.id}"
            names = " and ".join(f"{s.type} {s.id}" for s in suspects[:3])
            through, check = f" through {names}", f"check {names}"
            tied = []
            if not f.placed:
                # a tie across routes: say where it lies, name none (no one is sent to a
                # component picked at random)
                kinds = " or ".join(sorted({f"{s.type}es" if s.type == "switch"
                                            else f"{s.type}s" for s in suspects}))
                more = ", ..." if len(suspects) > 4 else ""
                through = ""
                check = (f"the slowdown lies on one of {len(suspects)} {kinds} on different "
                         f"routes between their members ({', '.join(s.id for s in suspects[:4])}"
                         f"{more}), which explain it equally: per-connection times (c4's hook "
                         "or link statistics) or the switches' port counters would place it")
                tied = [f"{s.type} {s.id}" for s in suspects[:64]]
                suspects = []
            if f.duty is not None:
                summary = (f"{len(f.observations)} {f.via}{through} are slow again and "
                           f"again: in {100 * f.duty:.0f}% of their transfers since the first "
                           f"of {f.episodes} episodes, {f.slowdown:.1f}x slower than "
                           f"{f.against} when slow, normal between, while {f.healthy} others "
                           f"are normal: {check} (a flapping port, pause frames, a "
                           "marginal cable)")
            else:
                summary = (f"{len(f.observations)} {f.via}{through} transfer "
                           f"{f.slowdown:.1f}x slower than {f.against} while "
                           f"{f.healthy} others are normal: {check}")
            evidence = {"slow": f.observations[:32], "slow_count": len(f.observations),
                        "slowdown": round(f.slowdown, 3), "healthy": f.healthy,
                        "cleared_by": f.explanation.cleared_by, "via": f.via}
            if tied:
                evidence["explained_equally_by"] = tied
            if f.duty is not None:
                evidence.update(recurring=True, slow_fraction=round(f.duty, 3),
                                episodes=f.episodes)
            for old, prev in self.reporter.open_findings("comm_slow"):
                if old != fid and not old.startswith(LOSSY_PREFIX) \
                        and set(prev.connections) & set(f.observations):
                    self.reporter.resolve(old, now, f"superseded by {fid}")
            self.reporter.file(Finding("comm_slow", fid, tuple(suspects), f.onset_ns, summary,
                                       evidence=evidence, connections=tuple(f.observations),
                                       recurring=f.duty is not None, via=f.via), now)
            current.add(fid)
        self._pending = pending
        # slowness that went away was transient (congestion by other traffic): withdraw it; an
        # intermittent fault comes back and re-opens its report
        for old in self.reporter.open_ids("comm_slow"):
            if old not in current and not old.startswith(LOSSY_PREFIX):
                self.reporter.resolve(old, now, "the connections are back to their baseline",
                                      cleared=True)
        self._symptoms(now)
