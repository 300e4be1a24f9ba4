"""Lossy links from retransmissions: connections whose senders retransmit far more than the rest
of the job, localized to the network components they share and no clean connection crosses.

Packet loss shows in timings only as rare retransmission timeouts (a shifted tail, not a shifted
median), but the sockets count every retransmitted segment. Each connection's count over a
sliding window is compared with an absolute floor, the fleet's typical count and the
connection's own baseline (learnt while it is clean); it must also retransmit in several samples
of the window, so that one burst of drops is not a lossy link. Lossy connections are explained
by the components on any of their (ECMP) paths, clean ones clear the components on all of theirs
(tomography.explain). Rows without a retransmission count (traces) are ignored.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

from c4.report import Suspect
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.distinct import distinct_inverse
from diagnosis.engine.localize import Localizer
from diagnosis.engine.placement import Placement
from diagnosis.engine.records import ConnRecords
from diagnosis.engine.reporter import Finding, Reporter
from diagnosis.engine.tomography import Component, Explanation, explain

PREFIX = "comm_slow:lossy:"
# The fleet's reference count: a lower quartile, since one bad NIC of a small job touches most
# of its connections (two thirds with three hosts).
FLEET_QUANTILE = 25
# Weight of the latest window in a clean connection's baseline (per analysis pass).
BASELINE_WEIGHT = 0.2


class _Samples(NamedTuple):
    """Retransmission samples: connection id, start, end, retransmitted segments."""
    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    retrans: np.ndarray

    def where(self, keep: np.ndarray) -> _Samples:
        return _Samples(*(a[keep] for a in self))

    @staticmethod
    def spanned(samples: _Samples) -> tuple[_Samples, int]:
        """The samples and their longest one (0 when none)."""
        span = int((samples.end - samples.start).max()) if len(samples.key) else 0
        return samples, span

    @staticmethod
    def join(parts: list[_Samples]) -> _Samples:
        if not parts:
            return _Samples(*(np.zeros(0, dtype=np.int64) for _ in range(4)))
        return _Samples(*(np.concatenate(c) for c in zip(*parts)))


class LossyLinks:
    """Per connection (src, dst ranks): the retransmission samples of the last window; files,
    updates and withdraws ``comm_slow`` reports of lossy components."""

    def __init__(self, cfg: EngineConfig, localizer: Localizer, placement: Placement,
                 reporter: Reporter) -> None:
        self.cfg, self.localizer, self.placement = cfg, localizer, placement
        self.reporter = reporter
        self._keys: dict[int, int] = {}
        self.src = np.zeros(0, dtype=np.int64)
        self.dst = np.zeros(0, dtype=np.int64)
        self.own = np.zeros(0, dtype=np.float64)     # learnt retransmissions per window
        # the window's samples as the batches brought them: appending a batch must not copy
        # the window, which at 100k+ ranks holds millions of samples
        self._chunks: list[_Samples] = []
        self._ends: list[int] = []           # per batch, its oldest sample's end
        self._joined: _Samples | None = None
        self._sets: list[tuple[frozenset[Component], frozenset[Component]] | None] = []
        self._latest = -1
        # per batch, its longest sample (windowed statistics span whole windows): the window
        # follows the samples it holds, so it shortens again when a job's windows do
        self._spans: list[int] = []
        self._open: dict[str, str] = {}      # component -> id of its open report
        self._episodes: Counter[str] = Counter()

    def add(self, conns: ConnRecords) -> None:
        if conns.retrans is None or len(conns) == 0:
            return
        done = conns.t_end_ns >= 0
        if not done.any():
            return
        src, dst = conns.src[done].astype(np.int64), conns.dst[done].astype(np.int64)
        uniq, inv = distinct_inverse((src << 32) | dst)
        start, end = conns.t_start_ns[done], conns.t_end_ns[done]
        # a socket replaced between two samples may count backwards: nothing retransmitted
        retrans = np.maximum(conns.retrans[done], 0)
        batch, span = _Samples.spanned(_Samples(self._key_ids(uniq)[inv], start, end, retrans))
        self._chunks.append(batch)
        self._spans.append(span)
        self._ends.append(int(end.min()))
        self._joined = None
        self._latest = max(self._latest, int(end.max()))
        # samples past the window are dropped a quarter of a window late, all at once: one
        # batch per node and window, pruned on every batch, cost a pass over every batch of
        # the window each time (a Python loop over thousands of batches, per batch); the
        # window itself (``_window``) holds only the samples of the window
        cutoff = self._cutoff() - self.window_ns // 4
        if min(self._ends) <= cutoff:
            # (batches come in about time order, not exactly: every one is looked at)
            kept = [(c, span) if first > cutoff else _Samples.spanned(c.where(c.end > cutoff))
                    for c, span, first in zip(self._chunks, self._spans, self._ends,
                                              strict=True)]
            kept = [(c, span) for c, span in kept if len(c.key)]
            self._chunks, self._spans = [c for c, _ in kept], [span for _, span in kept]
            self._ends = [int(c.end.min()) for c in self._chunks]

    def _cutoff(self) -> int:
        """The end of the oldest sample the window no longer holds."""
        return self._latest - self.window_ns

    @property
    def window_ns(self) -> int:
        """The sliding window: the configured one, or long enough for the samples a verdict
        needs when each sample spans a long statistics window (a job whose windows were
        lengthened to hold its records budget)."""
        span = max(self._spans, default=0)
        return max(self.cfg.lossy_window_ns, (self.cfg.lossy_min_samples + 1) * span)

    def _window(self) -> _Samples:
        if self._joined is None:
            joined = _Samples.join(self._chunks)
            keep = joined.end > self._cutoff()
            if keep.all():
                span = max(self._spans, default=0)
            else:
                joined, span = _Samples.spanned(joined.where(keep))
            self._joined = joined
            self._spans = [span] if len(joined.key) else []
            self._chunks = [joined] if len(joined.key) else []
            self._ends = [int(joined.end.min())] if len(joined.key) else []
        return self._joined

    def _key_ids(self, codes: np.ndarray) -> np.ndarray:
        """Ids of the connections (src << 32 | dst), new ones numbered in bulk."""
        get = self._keys.get
        ids = np.fromiter((get(c, -1) for c in codes.tolist()), dtype=np.int64, count=len(codes))
        new = ids < 0
        if new.any():
            fresh = codes[new]
            first = len(self._keys)
            ids[new] = np.arange(first, first + len(fresh))
            self._keys.update(zip(fresh.tolist(), range(first, first + len(fresh))))
            self.src = np.concatenate([self.src, fresh >> 32])
            self.dst = np.concatenate([self.dst, fresh & 0xFFFFFFFF])
            self.own = np.concatenate([self.own, np.zeros(len(fresh))])
            self._sets.extend([None] * len(fresh))
        return ids

    def _paths(self, k: int) -> tuple[frozenset[Component], frozenset[Component]]:
        """(may, must) components of connection ``k``, cached once both ends are placed."""
        found = self._sets[k]
        if found is None:
            s, d = int(self.src[k]), int(self.dst[k])
            found = self.localizer.pair(s, d)
            if self.placement.host(s) is not None and self.placement.host(d) is not None:
                self._sets[k] = found
        return found

    def judge(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lossy, clean, count) per connection over the current window; learns the clean
        connections' baselines."""
        cfg = self.cfg
        K = len(self._keys)
        win = self._window()
        key, retrans = win.key, win.retrans
        count = np.bincount(key, weights=retrans, minlength=K)
        samples = np.bincount(key, minlength=K)
        hit = np.bincount(key, weights=retrans > 0, minlength=K)
        active = samples >= cfg.lossy_min_samples
        if not active.any():
            return np.zeros(K, bool), np.zeros(K, bool), count
        fleet = float(np.percentile(count[active], FLEET_QUANTILE, method="lower"))
        lossy = active & (hit >= cfg.lossy_min_samples) & (count >= cfg.lossy_min_retrans) \
            & (count >= cfg.lossy_factor * fleet) & (count >= cfg.lossy_factor * self.own)
        clean = active & ~lossy & (count < cfg.lossy_min_retrans / 2)
        self.own[clean] += BASELINE_WEIGHT * (count[clean] - self.own[clean])
        return lossy, clean, count

    def update(self, now: int) -> None:
        """Judge the window and file, update or withdraw the lossy-link reports."""
        if not self._keys:
            return
        lossy, clean, count = self.judge()
        current: set[str] = set()
        lossy_idx = [k for k in np.flatnonzero(lossy).tolist() if self._paths(k)[0]]
        if lossy_idx:
            # healthy traffic clears what it surely crosses: counted once per distinct path
            musts = Counter(m for k in np.flatnonzero(clean).tolist() if (m := self._paths(k)[1]))
            crossing: Counter[Component] = Counter()
            for must, n in musts.items():
                for c in must:
                    crossing[c] += n
            found, _ = explain([self._paths(k)[0] for k in lossy_idx], [], self.cfg.comm_purity,
                               max_sets=4, clearing=lambda c: crossing[c])
            fleet = float(np.median(count[clean])) if clean.any() else 0.0
            for e in found:
                keys = [lossy_idx[i] for i in e.explained]
                current.add(self._file(e, keys, count, int(clean.sum()), fleet, now))
        for comp, fid in list(self._open.items()):
            if fid not in current:
                del self._open[comp]
                self.reporter.resolve(fid, now, "the connections retransmit no more than the "
                                      "rest", cleared=True)

    def _onset(self, keys: list[int], now: int) -> int:
        """When the explained connections began to lose: per connection its earliest sample of
        the window with a quarter of its mean retransmissions or more (background retransmits
        are a few segments), the time most of them agree on."""
        K = len(self._keys)
        key, start, _, retrans = self._window()
        rows = np.flatnonzero(np.isin(key, keys) & (retrans > 0))
        if len(rows) == 0:
            return now
        k, r = key[rows], retrans[rows]
        mean = np.bincount(k, weights=r, minlength=K) / np.maximum(np.bincount(k, minlength=K), 1)
        big = r >= 0.25 * mean[k]
        first = np.full(K, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, k[big], start[rows][big])
        firsts = first[np.unique(k[big])]
        return int(np.percentile(firsts, 50, method="higher"))

    def _file(self, e: Explanation, keys: list[int], count: np.ndarray, clean: int,
              fleet: float, now: int) -> str:
        comps = e.components
        score = min(max(e.score, 0.0), 1.0)
        suspects = [self.placement.suspect(int(c.id), score) if c.type == "rank"
                    else Suspect(c.type, c.id, score) for c in comps]
        base = f"{PREFIX}{comps[0].type}:{comps[0].id}"
        names = [f"{self.src[k]}>{self.dst[k]}" for k in keys]
        fid = self._open.get(base)
        if fid is None:
            # a lossy connection moved to another explanation: that report is superseded
            for comp, old in list(self._open.items()):
                prev = self.reporter.finding(old)
                if prev is not None and set(prev.connections) & set(names):
                    del self._open[comp]
                    self.reporter.resolve(old, now, f"superseded by {base}")
            # an earlier episode on the same component was withdrawn: this is a new fault
            self._episodes[base] += 1
            n = self._episodes[base]
            fid = self._open[base] = base if n == 1 else f"{base}#{n}"
        what = " and ".join(f"{s.type} {s.id}" for s in suspects[:3])
        summary = (f"{len(keys)} connections through {what} retransmit far more segments than "
                   f"the rest of the job (packet loss) while {clean} others stay clean: check "
                   f"{what} (cable, optics, NIC)")
        onset = self._onset(keys, now)
        window_s = self.window_ns / 1e9
        evidence = {"via": "retransmissions", "lossy": names[:32], "lossy_count": len(keys),
                    "retrans": {n: int(count[k]) for n, k in zip(names[:32], keys[:32])},
                    "retrans_total": int(count[keys].sum()), "clean": clean,
                    "clean_median_retrans": round(fleet, 1), "window_s": window_s,
                    "cleared_by": e.cleared_by}
        self.reporter.file(Finding("comm_slow", fid, tuple(suspects), onset, summary,
                                   evidence=evidence, connections=tuple(names),
                                   via="retransmissions"), now)
        return fid
