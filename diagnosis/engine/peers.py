"""Connections slow from their first transfer on. A connection is judged against its own
baseline, learnt on its first transfers; a NIC or cable already degraded when recording began
(a job restarted onto a bad node) taught it a slow baseline. Such connections stand out against
their peers instead: the connections that move as many bytes per transfer.

Only host-edge components (a NIC and its cable) are named this way. Every NIC of a homogeneous
job carries the same share of its traffic, while a fabric link's share depends on how ECMP
hashed the flows: two flows on one uplink each take twice as long in a healthy job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from diagnosis.engine.config import EngineConfig
from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.series import robust_sigma, row_quantile
from diagnosis.engine.tomography import Component, Explanation, explain

KeySets = Callable[[ConnWindow, int], tuple[frozenset[Component], frozenset[Component]]]


@dataclass
class PeerVerdict:
    keys: np.ndarray          # connection keys judged against peers
    slow: np.ndarray          # per judged key: its baseline stands out above its peers'
    ratio: np.ndarray         # per judged key: its baseline over its peers' median


def judge(win: ConnWindow, cfg: EngineConfig) -> PeerVerdict:
    """Each connection with a learnt baseline against the others of its transfer size (to the
    nearest power of two), where at least ``comm_peer_min`` are; a connection that has since turned
    faster than its baseline is left out (the baseline was a passing state)."""
    bank = win.bank
    n = min(len(win), len(bank))
    base = bank.base[:n]
    ok = np.isfinite(base) & (base > 0) & (win.last_bytes[:n] > 0)
    keys = np.flatnonzero(ok)
    if len(keys):
        # its newest samples (NaN where it has fewer)
        cols = (bank.pos[keys][:, None] - 8 + np.arange(8)[None, :]) % bank.K
        recent = row_quantile(bank.ring[keys[:, None], cols], 0.5)
        keys = keys[recent > -cfg.comm_min_excess]
    x = np.log(base[keys])
    size = np.round(np.log2(win.last_bytes[keys])).astype(np.int64)
    slow = np.zeros(len(keys), dtype=bool)
    judged = np.zeros(len(keys), dtype=bool)
    ratio = np.ones(len(keys))
    for s in np.unique(size):
        m = size == s
        if m.sum() < cfg.comm_peer_min:
            continue
        dev = x[m] - np.median(x[m])
        sigma = robust_sigma(x[m])
        judged[m] = True
        slow[m] = dev > max(np.log1p(cfg.comm_peer_excess), cfg.comm_noise_k * 2 * sigma)
        ratio[m] = np.exp(dev)
    return PeerVerdict(keys[judged], slow[judged], ratio[judged])


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
                  placement_nic: Callable[[int], str | None], purity: float
                  ) -> tuple[list[Explanation], np.ndarray]:
    """Host-edge components that explain the connections slow against their peers, cleared by
    the connections that are not; returns them and the slow keys (explanation indices refer to
    them)."""
    slow_keys = verdict.keys[verdict.slow]
    if not len(slow_keys):
        return [], slow_keys
    obs = [edge_sets(win, key_sets, placement_nic, int(k)) for k in slow_keys]
    keep = np.array([bool(o) for o in obs])
    slow_keys = slow_keys[keep]
    obs = [o for o in obs if o]
    # only healthy connections through those NICs can clear anything
    nics = {c.id for o in obs for c in o if c.type == "nic"}
    ranks = np.unique(np.r_[win.src, win.dst])
    near = ranks[[placement_nic(int(r)) in nics for r in ranks.tolist()]]
    ok = verdict.keys[~verdict.slow]
    ok = ok[np.isin(win.src[ok], near) | np.isin(win.dst[ok], near)]
    healthy = [edge_sets(win, key_sets, placement_nic, int(k)) for k in ok]
    found, _ = explain(obs, healthy, purity)
    return found, slow_keys
