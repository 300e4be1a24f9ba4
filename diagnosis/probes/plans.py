"""Probe plans, the way operators bisect with nccl-tests: pairwise tests between a suspect and
known-good peers, and bisection over a set of hosts. Each measurement is judged against the
healthy peers (the best bus bandwidth measured in the same plan) and, when a topology is given,
against what the links along the path can carry.

A measurement is *slow* when its bus bandwidth is below ``slow_ratio`` times the reference, or
when the probe failed (timed out, exited non-zero): a hang is the strongest confirmation. The
reference is the better of the best healthy measurement and the topology's expectation (link
capacity times ``efficiency``): peers alone cannot tell when every host measured is slow, and
an expectation alone is wrong when the fabric never reaches its line rate."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from c4.settings import between, non_negative, setting, validate
from diagnosis.errors import ConfigError
from diagnosis.probes.api import ProbeError, ProbeHost, Prober, ProbeResult

if TYPE_CHECKING:
    from c4.topology import Topology

log = logging.getLogger(__name__)

CONFIRMED = "confirmed"
CLEARED = "cleared"
INCONCLUSIVE = "inconclusive"


def _fraction(v: float) -> str | None:
    return None if 0.0 < v <= 1.0 else "must be in (0, 1]"


@dataclass(frozen=True)
class PlanConfig:
    slow_ratio: float = setting(0.5, flag="--slow-ratio", env="C4_PROBE_SLOW_RATIO",
                                check=between(0.0, 1.0),
                                help="Slow means below this fraction of the reference "
                                     "bandwidth.")
    #: Pairs among the peers measured as the healthy baseline of a pairwise plan.
    baseline_pairs: int = setting(1, check=non_negative)
    #: Share of the links' capacity a healthy test reaches (NCCL's bus bandwidth is typically
    #: 80-95% of line rate): the topology's expectation is capacity times this.
    efficiency: float = setting(0.8, check=_fraction)

    def __post_init__(self) -> None:
        validate(self, ConfigError)


@dataclass(frozen=True)
class Verdict:
    """What the probes say about one host."""

    host: str
    status: str  # CONFIRMED, CLEARED or INCONCLUSIVE
    reason: str
    measured_GBps: float | None = None   # the suspect's (median) bus bandwidth
    reference_GBps: float | None = None  # what healthy hosts reached
    expected_GBps: float | None = None   # what the topology's links allow
    results: tuple[ProbeResult, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "status": self.status, "reason": self.reason,
                "measured_GBps": _r(self.measured_GBps), "reference_GBps": _r(self.reference_GBps),
                "expected_GBps": _r(self.expected_GBps),
                "results": [r.to_json() for r in self.results]}


@dataclass(frozen=True)
class BisectOutcome:
    culprits: tuple[str, ...]
    verdicts: tuple[Verdict, ...]
    steps: tuple[ProbeResult, ...] = field(default_factory=tuple)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"culprits": list(self.culprits), "reason": self.reason,
                "verdicts": [v.to_json() for v in self.verdicts],
                "steps": [s.to_json() for s in self.steps]}


def expected_busbw(topology: Topology | None, hosts: Sequence[str]) -> float | None:
    """GB/s the fabric can carry between consecutive hosts of a ring over ``hosts``: per host
    pair, the NICs matched in order (one per rail), each pair limited by the slowest link of
    its best path; the ring is as fast as its slowest pair. None when unknown."""
    if topology is None or len(hosts) < 2:
        return None
    known = set(topology.hosts())
    if any(h not in known for h in hosts):
        return None
    pairs = list(zip(hosts, [*hosts[1:], hosts[0]])) if len(hosts) > 2 else [tuple(hosts)]
    worst = None
    for a, b in pairs:
        total = 0.0
        for na, nb in zip(topology.nics(a), topology.nics(b)):
            paths = topology.paths(na, nb)
            if paths:
                total += max(min(topology.capacity(lk) for lk in topology.path_links(p))
                             for p in paths)
        if total <= 0:
            return None
        worst = total if worst is None else min(worst, total)
    return None if worst is None else worst / 8.0  # Gbit/s -> GB/s


def pairwise(prober: Prober, suspect: ProbeHost, peers: Sequence[ProbeHost], *,
             config: PlanConfig | None = None, topology: Topology | None = None) -> Verdict:
    """Confirm or clear ``suspect`` by pair tests with each peer, judged against pair tests
    among the peers themselves (and the topology's expectation, when given).

    Raises:
        ProbeError: no peers, or the prober cannot run at all.
    """
    cfg = config or PlanConfig()
    peers = [p for p in peers if p.id != suspect.id]
    if not peers:
        raise ProbeError(f"no peer to test {suspect.id} against: name at least one known-good "
                         "host")
    own = tuple(prober.pair(suspect, p) for p in peers)
    base = tuple(prober.pair(peers[i], peers[i + 1])
                 for i in range(min(cfg.baseline_pairs, len(peers) - 1)))
    expected = expected_busbw(topology, [suspect.id, peers[0].id])
    healthy = [r.busbw_GBps for r in base if r.ok and r.busbw_GBps > 0]
    if healthy:  # the suspect's good pairs count as healthy peers too
        healthy += [r.busbw_GBps for r in own if r.ok]
    reference = _best(max(healthy) if healthy else None, expected, cfg)
    results = own + base
    measured = statistics.median(r.busbw_GBps if r.ok else 0.0 for r in own)
    if reference is None:
        if base and not healthy:
            why = f"the baseline among peers failed too ({base[0].error or 'no bandwidth'})"
        else:
            why = "nothing to compare with: give two or more peers, or a topology"
        if not all(r.ok for r in own):
            why = f"{_failures(own)}; but {why}"
        return Verdict(suspect.id, INCONCLUSIVE, why, measured, None, expected, results)
    slow = [r for r in own if _slow(r, reference, cfg)]
    line = (f"{suspect.id} reached {measured:.3g} GB/s with {len(own)} peer(s) against "
            f"{reference:.3g} GB/s among healthy peers"
            + (f" ({expected:.3g} GB/s expected from the links)" if expected else ""))
    if len(slow) * 2 > len(own):
        status = CONFIRMED
        failures = [r for r in slow if not r.ok]
        why = f"{line}: slow with {_names(slow, suspect.id)}" + (
            f"; {_failures(failures)}" if failures else "")
    elif not slow:
        status, why = CLEARED, f"{line}: no slower than its peers"
    else:
        status, why = INCONCLUSIVE, (f"{line}: slow only with {_names(slow, suspect.id)}; "
                                     "look at those peers or the path between")
    return Verdict(suspect.id, status, why, measured, reference, expected, results)


def bisect(prober: Prober, hosts: Sequence[ProbeHost], *, known_good: Sequence[ProbeHost] = (),
           config: PlanConfig | None = None, topology: Topology | None = None,
           on_step: Callable[[ProbeResult], None] | None = None) -> BisectOutcome:
    """Find the slow host(s) among ``hosts``: halve the set, measure both halves (a group
    collective each), keep the halves that are slow against the faster one, and so on. Sets of
    two or three hosts are measured host by host, in a pair with a host already cleared (or one
    of ``known_good``); without one, three hosts are measured in all three pairs and the host
    in both slow pairs is the culprit. With a topology, the whole set is measured first and,
    if it reaches what the links allow, no more.

    Raises:
        ProbeError: fewer than two hosts, or the prober cannot run at all.
    """
    cfg = config or PlanConfig()
    hosts = list(hosts)
    if len(hosts) < 2:
        raise ProbeError("bisection needs at least two hosts")
    steps: list[ProbeResult] = []
    good: list[ProbeHost] = list(known_good)
    status: dict[str, Verdict] = {}
    expected = expected_busbw(topology, [h.id for h in hosts])

    def measure(group: Sequence[ProbeHost]) -> ProbeResult:
        r = prober.pair(*group) if len(group) == 2 else prober.group(list(group))
        steps.append(r)
        if on_step is not None:
            on_step(r)
        return r

    def reference() -> float | None:
        ok = [s.busbw_GBps for s in steps if s.ok and s.busbw_GBps > 0]
        return _best(max(ok) if ok else None, expected, cfg)

    def settle(h: ProbeHost, slow: bool, evidence: Sequence[ProbeResult]) -> None:
        ref = reference()
        worst = min((r.busbw_GBps if r.ok else 0.0 for r in evidence), default=None)
        where = "; ".join(f"{'+'.join(r.hosts)} {_describe(r)}" for r in evidence)
        if slow:
            status[h.id] = Verdict(h.id, CONFIRMED, f"{where}, against {_gb(ref)} among healthy "
                                   "hosts", worst, ref, expected, tuple(evidence))
            return
        status.setdefault(h.id, Verdict(h.id, CLEARED, where, worst, ref, expected,
                                        tuple(evidence)))
        if all(g.id != h.id for g in good):
            good.append(h)

    def few(cands: list[ProbeHost]) -> list[str]:
        ids = {h.id for h in cands}
        mate = next((g for g in good if g.id not in ids), None)
        if mate is not None:
            got = [(h, measure([h, mate])) for h in cands]
            ref = reference()
            for h, r in got:
                settle(h, _slow(r, ref, cfg), [r])
            return [h.id for h, r in got if status[h.id].status == CONFIRMED]
        if len(cands) == 2:
            for h in cands:
                status.setdefault(h.id, Verdict(h.id, INCONCLUSIVE, "two hosts and no cleared "
                                                "host to pair either with: name a known-good "
                                                "host", expected_GBps=expected))
            return []
        pairs = [(a, b, measure([a, b])) for i, a in enumerate(cands) for b in cands[i + 1:]]
        ref = reference()
        slow = {(a.id, b.id) for a, b, r in pairs if _slow(r, ref, cfg)}
        found = []
        for h in cands:
            mine = [(a, b, r) for a, b, r in pairs if h in (a, b)]
            others = [(a.id, b.id) for a, b, _ in pairs if h not in (a, b)]
            guilty = all((a.id, b.id) in slow for a, b, _ in mine) and \
                not any(o in slow for o in others)
            if guilty:
                found.append(h.id)
        for h in cands:
            mine_r = [r for a, b, r in pairs if h in (a, b)]
            settle(h, h.id in found, mine_r)
        return found

    def search(cands: list[ProbeHost]) -> list[str]:
        if len(cands) <= 3:
            return few(cands)
        half = len(cands) // 2
        parts = [cands[:half], cands[half:]]
        got = [measure(p) for p in parts]
        ref = reference()
        slow = [_slow(r, ref, cfg) for r in got]
        for part, r, is_slow in zip(parts, got, slow):
            if not is_slow:
                for h in part:
                    settle(h, False, [r])
        found: list[str] = []
        for part, is_slow in zip(parts, slow):
            if is_slow:
                found += search(part)
        return found

    if expected is not None:
        whole = measure(hosts)
        if not _slow(whole, expected * cfg.efficiency, cfg):
            for h in hosts:
                settle(h, False, [whole])
            return BisectOutcome((), tuple(status[h.id] for h in hosts), tuple(steps),
                                 f"the whole set {_describe(whole)}, at least "
                                 f"{cfg.slow_ratio:.0%} of the {expected:.3g} GB/s its links "
                                 "allow: no slow host")
    culprits = search(hosts)
    if culprits:
        reason = f"slow: {', '.join(culprits)}"
    elif all(h.id in status and status[h.id].status == CLEARED for h in hosts):
        reason = ("every part measured healthy: no single host is slow (if the whole job is, "
                  "suspect the links between the parts)")
    else:
        reason = "no host confirmed"
    verdicts = tuple(status.get(h.id) or Verdict(h.id, INCONCLUSIVE, "not measured apart",
                                                 expected_GBps=expected) for h in hosts)
    return BisectOutcome(tuple(culprits), verdicts, tuple(steps), reason)


def _best(peers: float | None, expected: float | None, cfg: PlanConfig) -> float | None:
    """The reference: the better of the healthy peers and the topology's expectation."""
    known = [x for x in (peers, None if expected is None else expected * cfg.efficiency)
             if x is not None]
    return max(known) if known else None


def _slow(r: ProbeResult, reference: float | None, cfg: PlanConfig) -> bool:
    if not r.ok:
        return True
    return reference is not None and r.busbw_GBps < cfg.slow_ratio * reference


def _describe(r: ProbeResult) -> str:
    return f"reached {r.busbw_GBps:.3g} GB/s" if r.ok else f"failed ({r.error})"


def _gb(x: float | None) -> str:
    return "nothing" if x is None else f"{x:.3g} GB/s"


def _names(results: Sequence[ProbeResult], suspect: str) -> str:
    return ", ".join(h for r in results for h in r.hosts if h != suspect)


def _failures(results: Sequence[ProbeResult]) -> str:
    return "; ".join(f"{'+'.join(r.hosts)} failed: {r.error}" for r in results if not r.ok)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)
