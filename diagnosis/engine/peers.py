"""Connections slow from their first transfer on. A connection is judged against its own
baseline, learnt on its first transfers; a component already degraded when recording began (a
job restarted onto a bad node, a spine uplink that was slow before the job) taught it a slow
baseline. Such connections stand out against their peers instead: the connections that move as
many bytes per transfer, at the same moment, once each is weighed by the load on its path.

The load model: connections of one transfer size run side by side (the rings of a data-parallel
all-reduce, the sends across one pipeline boundary), so each gets a fair share of every link it
crosses, the link's capacity over the connections of its size that cross it in the same
direction (those of one rank counted as far as their transfers overlap in time). A
connection's expected time per byte is the inverse of the smallest share on its path: two flows
hashed onto one uplink each take twice as long in a healthy job (an ECMP collision), and that
is no fault. What is compared is a connection's time per byte times its fair share, against
the best that connections of its size reach on their narrowest link (a low quantile: those
alone on their path, which nothing but a fault slows); a connection slow beyond its load is
evidence against every component on its path, cleared by those that are not. Counting
connections as sharing a link when they do not all run at once overcounts the load, which only
makes a connection look faster than it is: a fault may hide, but an ECMP collision never looks
like one.

With its path recorded, every component of it (NIC, cable, leaf, uplink, spine, core) can be
named this way. Without it, only the host edge is known for sure (a NIC and its cable, with the
NIC's capacity shared by its connections of the size), and only those are named: a connection
slow beyond the load of its NICs may have hashed onto a busy uplink."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from c4.topology.protocol import TopologyLike
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.distinct import distinct_inverse
from diagnosis.engine.medians import median_of_valid
from diagnosis.engine.series import even_spread, robust_sigma, row_quantile
from diagnosis.engine.tomography import Component, Explanation, explain

KeySets = Callable[[ConnWindow, int], tuple[frozenset[Component], frozenset[Component]]]

#: the connections whose samples give the noise of one sample (about a million samples)
_SIGMA_KEYS = 1 << 14
# past this many judged connections, how many they move at once is read from each one's
# newest ``_MOVING_SAMPLES`` samples, not its whole ring (at half a million connections the
# whole rings, put in order, took two seconds a judgement)
_MOVING_KEYS = 1 << 16
_MOVING_SAMPLES = 16


@dataclass
class PeerVerdict:
    keys: np.ndarray          # connection keys judged against peers
    slow: np.ndarray          # per judged key: its baseline stands out above its peers'
    ratio: np.ndarray         # per judged key: its (load-weighed) baseline over its peers'
    routed: np.ndarray        # per judged key: weighed by the load on its recorded path
    # per judged key: of a transfer size whose best connections fall short of the capacity of
    # their path (no peer to compare: every connection of the size is as slow), and itself
    # short of its fair share of that capacity by ``comm_cap_excess``
    short: np.ndarray
    # per judged key: its time per byte at its fair share over a link's at its capacity (NaN:
    # not judged so, its transfers being too short or its path's capacity unknown)
    cap_ratio: np.ndarray


class LoadModel:
    """The directed links (hops) each connection crosses and their capacities, from its
    recorded path, or, without one, its two NICs (egress and ingress, each at the NIC's
    capacity). Hops are interned as small integers; cached per key while its path stays."""

    def __init__(self, topology: TopologyLike) -> None:
        self.topo = topology
        self._ids: dict[tuple[str, str], int] = {}
        self._caps: list[float] = []
        self._key: dict[int, tuple[object, np.ndarray, bool]] = {}
        self._nic_cap: dict[str, float] = {}
        self._link_cap: dict[str, float | None] = {}
        # every key's hops while no path changes: (path version, flat, counts per key, routed)
        self._table: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._unplaced: set[int] = set()   # ranks of the table's keys not placed then
        # per key: its transfer size (log2) when first judged, the size its baseline was
        # learnt on (a ring that stalls ends with short transfers, which must not move its
        # connections to another size and leave their partners on a hop seemingly alone)
        self._size = np.zeros(0, dtype=np.int64)

    def sizes(self, keys: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """The remembered size class of each key (set from ``nbytes`` the first time)."""
        if len(keys) and int(keys.max()) >= len(self._size):
            grown = np.full(max(int(keys.max()) + 1, 2 * len(self._size)), -1, dtype=np.int64)
            grown[: len(self._size)] = self._size
            self._size = grown
        new = self._size[keys] < 0
        self._size[keys[new]] = np.round(np.log2(np.maximum(nbytes[new], 1))).astype(np.int64)
        return self._size[keys]

    def _hop(self, a: str, b: str, cap: float) -> int:
        h = self._ids.get((a, b))
        if h is None:
            h = self._ids[(a, b)] = len(self._caps)
            self._caps.append(cap)
        return h

    def caps(self) -> np.ndarray:
        return np.asarray(self._caps, dtype=np.float64)

    def nic_capacity(self, nic: str) -> float:
        cap = self._nic_cap.get(nic)
        if cap is None:
            cap = 0.0
            topo = self.topo
            if nic in topo:
                for n in topo.neighbors(nic):
                    if topo.kind(n) == "switch":
                        cap += sum(map(topo.capacity, topo.path_links([nic, n])))
            cap = self._nic_cap[nic] = cap if cap > 0 and np.isfinite(cap) else 1.0
        return cap

    def hop_table(self, win: ConnWindow, keys: np.ndarray,
                  nic_of: Callable[[int], str | None]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The hops of ``keys`` one after another, how many each key has, and whether each
        key's come from its recorded path (see ``hops``)."""
        # the table of every key, made again only when a path changes or a rank without a
        # NIC is placed, and extended by the keys that appear (the keys judged change from
        # one judgement to the next; a Python step per key of half a million cost a second,
        # three the first time)
        if self._table is not None and (
                self._table[0] != win.path_version
                or any(nic_of(r) is not None for r in self._unplaced)):
            self._table = None
        if self._table is None:
            self._unplaced = set()
            self._table = (win.path_version, *self._rows(win, 0, nic_of))
        elif len(self._table[2]) < len(win):
            version, flat, counts, routed = self._table
            f, c, r = self._rows(win, len(counts), nic_of)
            self._table = (version, np.r_[flat, f], np.r_[counts, c], np.r_[routed, r])
        _, flat_all, counts_all, routed_all = self._table
        counts = counts_all[keys]
        starts = (np.cumsum(counts_all) - counts_all)[keys]
        at = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())
        return flat_all[at], counts, routed_all[keys]

    def _rows(self, win: ConnWindow, lo: int, nic_of: Callable[[int], str | None]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(flat hops, counts, routed) of keys ``lo`` on: those with a recorded path one by
        one (``hops``), the others, most of a large job, at once from their ranks' NICs."""
        n = len(win)
        routed = np.fromiter(map(bool, win.path[lo:n]), dtype=bool, count=n - lo)
        counts = np.zeros(n - lo, dtype=np.int64)
        bare = np.flatnonzero(~routed) + lo
        ranks, inv = np.unique(np.r_[win.src[bare], win.dst[bare]], return_inverse=True)
        nics = [nic_of(int(r)) for r in ranks.tolist()]
        self._unplaced.update(int(r) for r, nic in zip(ranks.tolist(), nics, strict=True)
                              if nic is None)
        names = sorted({nic for nic in nics if nic is not None})
        index = {nic: i for i, nic in enumerate(names)}
        of_rank = np.array([-1 if nic is None else index[nic] for nic in nics], dtype=np.int64)
        out_hop = np.array([self._hop(nic, ">", self.nic_capacity(nic)) for nic in names],
                           dtype=np.int64)
        in_hop = np.array([self._hop(">", nic, self.nic_capacity(nic)) for nic in names],
                          dtype=np.int64)
        src, dst = of_rank[inv[:len(bare)]], of_rank[inv[len(bare):]]
        # a rank not placed yet has no hops until it is (the table is made again then); two
        # ranks behind one NIC cross no link
        two = (src >= 0) & (dst >= 0) & (src != dst)
        counts[bare - lo] = np.where(two, 2, 0)
        walked = {k: self.hops(win, k, nic_of)[0]
                  for k in (np.flatnonzero(routed) + lo).tolist()}
        for k, h in walked.items():
            counts[k - lo] = len(h)
        starts = np.cumsum(counts) - counts
        flat = np.empty(int(counts.sum()), dtype=np.int64)
        at = starts[bare[two] - lo]
        flat[at], flat[at + 1] = out_hop[src[two]], in_hop[dst[two]]
        for k, h in walked.items():
            flat[starts[k - lo]:starts[k - lo] + len(h)] = h
        return flat, counts, routed

    def _link_capacity(self, a: str, b: str) -> float | None:
        """The capacity of the link between nodes ``a`` and ``b`` (None: the topology lacks
        it, or gives it none); cached, as thousands of paths cross each link."""
        lk = f"{a}~{b}" if a <= b else f"{b}~{a}"
        if lk in self._link_cap:
            return self._link_cap[lk]
        cap: float | None = None
        if self.topo.has_link(lk):     # (not: a recorded hop the topology lacks)
            c = self.topo.capacity(lk)
            cap = c if np.isfinite(c) and c > 0 else None
        self._link_cap[lk] = cap
        return cap

    def hops(self, win: ConnWindow, k: int, nic_of: Callable[[int], str | None]
             ) -> tuple[np.ndarray, bool]:
        """(hop ids, routed) of connection key ``k``: routed when from its recorded path."""
        path = win.path[k]
        hit = self._key.get(k)
        if hit is not None and hit[0] is path:
            return hit[1], hit[2]
        out: list[int] = []
        routed = bool(path)
        if path:
            for a, b in itertools.pairwise(path):
                cap = self._link_capacity(a, b)
                if cap is not None:
                    out.append(self._hop(a, b, cap))
        else:
            src, dst = nic_of(int(win.src[k])), nic_of(int(win.dst[k]))
            if src is None or dst is None:
                # a rank not placed yet (the table holds keys not judged yet): asked again
                return np.zeros(0, dtype=np.int64), routed
            if src != dst:
                out = [self._hop(src, ">", self.nic_capacity(src)),
                       self._hop(">", dst, self.nic_capacity(dst))]
        arr = np.asarray(out, dtype=np.int64)
        self._key[k] = (path, arr, routed)
        return arr, routed


def judge(win: ConnWindow, cfg: EngineConfig, load: LoadModel | None = None,
          nic_of: Callable[[int], str | None] | None = None) -> PeerVerdict:
    """Each connection with a learnt baseline and ``comm_min_samples`` judged samples since,
    against the others of its transfer size (to the nearest power of two), where at least
    ``comm_peer_min`` are: slow when its baseline, and its level now (its newest samples), both
    fall short of what its share of the path allows by ``comm_peer_excess`` and by more than
    the noise (without a ``load`` model: exceed the median of its peers' so). A connection that
    has since turned faster than its baseline is left out (the baseline was a passing state,
    such as a transient congestion while it was learnt).

    What a share allows: the best rate that connections of the size reach on their path's
    narrowest link (a low quantile of time per byte times that capacity: the connections
    alone on their path), divided by how many of them share it."""
    bank = win.bank
    n = min(len(win), len(bank))
    base = bank.base[:n]
    judged_n = np.minimum(bank.count[:n] - bank.skip - bank.learn, bank.K)
    ok = np.isfinite(base) & (base > 0) & (win.last_bytes[:n] > 0) \
        & (judged_n >= cfg.comm_min_samples)
    keys = np.flatnonzero(ok)
    recent = np.zeros(len(keys))
    sigma = 0.0
    if len(keys):
        # its newest samples (NaN where it has fewer)
        cols = (bank.pos[keys][:, None] - 8 + np.arange(8)[None, :]) % bank.K
        recent = row_quantile(bank.ring[keys[:, None], cols], 0.5)
        keep = recent > -cfg.comm_min_excess
        keys, recent = keys[keep], recent[keep]
        # the noise of one sample against its key's baseline (a baseline is a median of
        # several, so its own noise is smaller), over an even spread of the keys (every
        # ring of half a million connections is tens of millions of samples)
        ring = bank.ring[even_spread(keys, _SIGMA_KEYS)]
        sigma = float(np.nan_to_num(robust_sigma(ring[np.isfinite(ring)]), nan=0.0)) \
            if np.isfinite(ring).any() else 0.0
    x = np.log(base[keys])
    now = x + np.log1p(np.maximum(recent, -0.99))
    share = np.full(len(keys), np.nan)
    cap = np.full(len(keys), np.nan)
    routed = np.zeros(len(keys), dtype=bool)
    if load is None or nic_of is None:
        size = np.round(np.log2(win.last_bytes[keys])).astype(np.int64)
    else:
        # the load counts every connection that carries traffic, judged or not
        busy = np.flatnonzero((win.last_bytes[:n] > 0) & (bank.count[:n] > 0))
        busy_size = load.sizes(busy, win.last_bytes[busy])
        at = np.searchsorted(busy, keys)
        size = busy_size[at]
        if len(keys):
            b_share, b_cap, b_routed = _shares(win, busy, busy_size, load, nic_of)
            share, cap, routed = b_share[at], b_cap[at], b_routed[at]
    modeled = np.isfinite(share)
    slow = np.zeros(len(keys), dtype=bool)
    judged = np.zeros(len(keys), dtype=bool)
    ratio = np.ones(len(keys))
    short = np.zeros(len(keys), dtype=bool)
    cap_ratio = np.full(len(keys), np.nan)
    for s in np.unique(size):
        for weighed in (True, False):
            m = (size == s) & (modeled == weighed)
            if m.sum() < cfg.comm_peer_min:
                continue
            margin = max(np.log1p(cfg.comm_peer_excess), cfg.comm_noise_k * sigma)
            if weighed:
                # time per byte at its fair share, against the best the size reaches alone
                xs, ns = x[m] + np.log(share[m]), now[m] + np.log(share[m])
                mid = float(np.quantile(x[m] + np.log(cap[m]), 0.1))
            else:
                # no load known: against the median of its peers, beyond their spread
                xs, ns = x[m], now[m]
                mid = float(np.median(xs))
                margin = max(margin, cfg.comm_noise_k * 2 * float(robust_sigma(xs)))
            judged[m] = True
            slow[m] = (xs - mid > margin) & (ns - mid > margin)
            ratio[m] = np.exp(xs - mid)
            if weighed:
                short[m], cap_ratio[m] = _short_of_capacity(xs, ns, mid, cap[m], s, margin,
                                                            cfg)
    return PeerVerdict(keys[judged], slow[judged], ratio[judged], routed[judged],
                       short[judged], cap_ratio[judged])


def _short_of_capacity(xs: np.ndarray, ns: np.ndarray, best: float, cap: np.ndarray,
                       size: int, margin: float, cfg: EngineConfig
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Per connection of one transfer size: whether it falls short of what its fair share of
    its path's capacity allows, when even the best of the size do (a component that every one
    of them crosses, slow since the recording began: peers cannot tell), and by how much.
    ``xs``, ``ns``: log time per byte (ns) at its fair share, baseline and now; ``best``: the
    size's low quantile of it at the narrowest hop's capacity; ``cap``: that capacity (Gbit/s).

    At its capacity a link moves a byte in 8 bits over its rate: log time per byte times rate
    is log 8 then. Only transfers long enough for the link's rate, not the per-message
    latency, to set their time are judged so."""
    ideal = float(np.log(8.0))
    none = np.zeros(len(xs), dtype=bool)
    if float(np.median(2.0 ** size * 8.0 / cap)) < cfg.comm_cap_min_ns:
        return none, np.full(len(xs), np.nan)
    ratio = np.exp(xs - ideal)
    margin = max(margin, float(np.log1p(cfg.comm_cap_excess)))
    if best - ideal <= margin:
        return none, ratio
    return (xs - ideal > margin) & (ns - ideal > margin), ratio


def _shares(win: ConnWindow, keys: np.ndarray, size: np.ndarray, load: LoadModel,
            nic_of: Callable[[int], str | None]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per key: its fair share of its path (the smallest of its hops' capacity over the
    connections of its size that share the hop; NaN when no hop is known), the capacity of its
    narrowest hop, and whether its hops come from its recorded path.

    Connections of one size from different ranks on a hop are taken to share it (they make up
    one step of the job, such as the rings of an all-reduce). The connections of one rank
    share it only as far as their transfers overlap in time: a pipeline stage sends its
    activations forward and its gradients back through the same NIC at different moments of
    an iteration, while an all-to-all sends to every peer at once. Likewise for the
    connections into one rank; a hop is shared by the fewer of the two counts."""
    hops, counts, routed = load.hop_table(win, keys, nic_of)
    share = np.full(len(keys), np.nan)
    narrow = np.full(len(keys), np.nan)
    if not counts.sum():
        return share, narrow, routed
    owner = np.repeat(np.arange(len(keys)), counts)
    caps = load.caps()
    # read once for both ends
    moving = _moving(win, keys, win.bank.newest(keys, _MOVING_SAMPLES)
                     if len(keys) > _MOVING_KEYS else None)
    cell = size[owner].astype(np.int64) * len(caps) + hops

    def count(rank: np.ndarray) -> np.ndarray:
        """Per hop incidence: connections sharing the hop, counting those of one ``rank`` as
        many as overlap in time."""
        conc = _concurrency(win, keys, size * (int(rank.max()) + 1) + rank[keys],
                            moving=moving)
        r = rank[keys[owner]].astype(np.int64)
        # per (cell, rank): the keys on it, capped by the rank's concurrency (one integer
        # per pair: numpy's unique over columns sorts structured rows, far slower)
        width = int(r.max()) + 1
        pair, inv = distinct_inverse(cell * width + r)
        inv = inv.ravel()
        n_keys = np.bincount(inv)
        top = np.zeros(len(n_keys))
        np.maximum.at(top, inv, conc[owner])
        per_pair = np.minimum(n_keys, np.maximum(np.round(top), 1))
        cells, at = distinct_inverse(pair // width)
        total = np.bincount(at.ravel(), weights=per_pair)
        return total[np.searchsorted(cells, cell)]
    n_on = np.minimum(count(win.src), count(win.dst))
    fair = caps[hops] / n_on
    has = counts > 0
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    share[has] = np.minimum.reduceat(fair, starts[has])
    narrow[has] = np.minimum.reduceat(caps[hops], starts[has])
    return share, narrow, routed


@dataclass
class _Moving:
    """What ``_concurrency`` reads of each key's series, whatever the grouping: its samples'
    durations and end times, which of them are known, whether the key's samples are window
    statistics, and the share of time such a key is busy."""

    dur: np.ndarray
    t_end: np.ndarray
    ok: np.ndarray
    windowed: np.ndarray
    busy: np.ndarray | None


def _moving(win: ConnWindow, keys: np.ndarray,
            series: tuple[np.ndarray, np.ndarray] | None = None) -> _Moving:
    bank = win.bank
    ring, t_end = series if series is not None else bank.ordered(keys)
    nbytes = np.maximum(win.last_bytes[keys], 1).astype(np.float64)
    dur = (ring + 1.0) * bank.base[keys][:, None] * nbytes[:, None]
    ok = np.isfinite(dur) & (dur > 0)
    windowed = win.end_spread[keys] > 0
    busy = None
    if windowed.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            # (the medians over the samples marked, without writing NaN into the others)
            gap = median_of_valid(np.diff(t_end, axis=1), ok[:, 1:] & ok[:, :-1])[:, 0]
            busy = np.nan_to_num(np.clip(median_of_valid(dur, ok)[:, 0] / gap, 0.0, 1.0),
                                 nan=0.0)
    return _Moving(dur, t_end, ok, windowed, busy)


def _concurrency(win: ConnWindow, keys: np.ndarray, group: np.ndarray,
                 series: tuple[np.ndarray, np.ndarray] | None = None,
                 moving: _Moving | None = None) -> np.ndarray:
    """Per key: how many connections of its ``group`` (itself included) are typically moving
    while it is: the median, over its recent transfers (the samples of its series, each a
    duration ending at its time), of the group's transfers under way at the transfer's
    middle. A key whose samples are window statistics (a mean transfer per window, whose place
    in the window is unknown) counts the others of its group by the share of time each is
    busy, as if they came at random moments. ``series``: ``win.bank.ordered(keys)``, when
    already read; ``moving``: ``_moving(win, keys, series)``, when already made (it does not
    depend on the grouping)."""
    m = moving if moving is not None else _moving(win, keys, series)
    dur, t_end, ok, windowed, busy = m.dur, m.t_end, m.ok, m.windowed, m.busy
    group = distinct_inverse(group)[1]
    if busy is not None:
        total = np.bincount(group, weights=busy)
        by_share = 1.0 + total[group] - busy
        if windowed.all():
            return by_share
        ok = ok & ~windowed[:, None]
    else:
        by_share = np.ones(len(keys))
    k_ix, col = np.nonzero(ok)
    out = np.where(windowed, by_share, 1.0)
    if not len(k_ix):
        return out
    end = t_end[k_ix, col].astype(np.float64)
    start = end - dur[k_ix, col]
    mid = (start + end) / 2
    g = group[k_ix].astype(np.float64)
    # one sorted axis per group: times are offsets from the earliest start, groups spaced
    # wider than the span of times
    t0 = start.min()
    span = float(max(end.max() - t0, 1.0)) * 2 + 1.0
    o_s = np.sort(g * span + (start - t0))
    o_e = np.sort(g * span + (end - t0))
    q = g * span + (mid - t0)
    under_way = np.searchsorted(o_s, q, side="right") - np.searchsorted(o_e, q, side="left")
    # per key: the median over its transfers
    order = np.lexsort((under_way, k_ix))
    kk, uw = k_ix[order], under_way[order]
    first = np.searchsorted(kk, np.arange(len(keys)))
    n = np.bincount(kk, minlength=len(keys))
    has = n > 0
    out[has] = uw[first[has] + (n[has] - 1) // 2]
    return np.where(windowed, by_share, np.maximum(out, 1.0))


def edge_sets(win: ConnWindow, key_sets: KeySets, placement_nic: Callable[[int], str | None],
              k: int) -> frozenset[Component]:
    """The host-edge components that connection ``k`` surely crosses: its two NICs and their
    cables on its path."""
    ends = {placement_nic(int(win.src[k])), placement_nic(int(win.dst[k]))} - {None}
    _, must = key_sets(win, k)
    return frozenset(c for c in must
                     if (c.type == "nic" and c.id in ends)
                     or (c.type == "link" and ends & set(c.id.split("~"))))


def explain_peers(win: ConnWindow, verdict: PeerVerdict, key_sets: KeySets,
                  placement_nic: Callable[[int], str | None], purity: float,
                  edge_purity: float, clearing: Callable[[Component], int]
                  ) -> tuple[list[Explanation], np.ndarray]:
    """Components that explain the connections slow against their peers, cleared by the judged
    connections that are not (``clearing``: how many of those surely cross a component);
    returns them and the slow keys (explanation indices refer to them). A connection with its
    path recorded is evidence against every component of it, at ``purity``; one without, only
    against its host edge, at ``edge_purity``."""
    slow = verdict.slow
    slow_keys = verdict.keys[slow]
    if not len(slow_keys):
        return [], slow_keys
    routed = verdict.routed[slow]
    obs = [key_sets(win, int(k))[0] if r else edge_sets(win, key_sets, placement_nic, int(k))
           for k, r in zip(slow_keys.tolist(), routed.tolist())]
    keep = np.array([bool(o) for o in obs])
    slow_keys, routed = slow_keys[keep], routed[keep]
    obs = [o for o in obs if o]
    out: list[Explanation] = []
    idx = np.arange(len(slow_keys))
    for sel, pur in ((routed, purity), (~routed, edge_purity)):
        if not sel.any():
            continue
        part = [obs[i] for i in idx[sel].tolist()]
        found, _ = explain(part, [], pur, clearing=clearing)
        back = idx[sel]
        for e in found:
            e.explained = [int(back[i]) for i in e.explained]
            e.score *= len(part) / max(len(obs), 1)
        out += found
    return out, slow_keys
