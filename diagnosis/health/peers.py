"""A learnt model of "unlike its peers": each component's health vector against the job's
other components of the same kind (GPUs against GPUs, NIC ports against NIC ports, hosts
against hosts), refit as the job runs.

Why IsolationForest. The nodes of one job are near-identical hardware running the same step,
so "normal" is whatever most of them do right now, and the few that differ are the news. Of
the usual unsupervised detectors:

- a robust covariance (MinCovDet / EllipticEnvelope) assumes one Gaussian cloud and needs a
  well-conditioned covariance; health features are often constant across a healthy job
  (remapped rows 0, PCIe x16 everywhere), which makes it singular, and its cost grows with the
  square of the feature count and the FAST-MCD iterations;
- LOF needs a neighbour search per point (O(n log n) at best, with a k that must suit both
  a 16-node and a 4,096-node job) and judges density, which for a tight cluster of identical
  nodes is dominated by measurement noise;
- IsolationForest isolates points by random axis-aligned splits: it needs no distribution,
  is indifferent to constant and differently-scaled features, fits on a fixed sub-sample
  (256 rows) whatever the job size and scores in O(n · trees · log 256), so a refit for 4,096
  nodes stays well under a second (bench/health_model.py).

IsolationForest says *that* a row is odd, not *why*; the features are named from robust
z-scores (distance from the peers' median in units of their MAD): a component is reported when
the forest finds it isolated *and* at least one feature stands ``z_min`` MADs from its peers
(or one stands ``z_strong`` MADs out, which a forest splitting on random features can miss
when it is the only odd one of many), and those features (with the component's value and the
peers' median) are the evidence.
Small groups (fewer than ``min_forest`` members) are judged on the z-scores alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from sklearn.ensemble import IsolationForest

from c4.proto.health import HealthRecord
from diagnosis.health.findings import Finding

S = 1_000_000_000

#: signals that count up (their rate over the window is the feature, not their level)
_COUNTER_PREFIXES = ("ecc_", "event_us_", "retired_", "nvlink_", "pcie_replays", "symbol_error",
                     "port_rcv_errors", "link_downed", "link_error_recovery", "port_xmit_",
                     "local_", "out_of_sequence", "packet_seq_err", "remap_corr", "remap_unc")
#: signals left out of the model: static facts and flags the rules judge on their own
_SKIP = frozenset({"sm_clock_max_mhz", "power_limit_w", "pcie_gen_max", "pcie_width_max",
                   "rate_gbps", "remap_banks_max", "remap_banks_high", "remap_banks_partial",
                   "remap_banks_low", "remap_banks_none", "xid_last", "up", "remap_pending",
                   "remap_failure", "reset_required", "drain_reset_recommended",
                   "retired_pending"})


def is_counter(name: str) -> bool:
    return name.startswith(_COUNTER_PREFIXES)


def component_kind(target: str) -> str:
    """GPUs (``node3/gpu1``), hosts (``node3``), and NIC ports (anything else under a host:
    ``node3/nic0``, or an unmapped ``node3/mlx5_0/1``)."""
    return "gpu" if "/gpu" in target else "host" if "/" not in target else "nic"


@dataclass(frozen=True)
class PeerConfig:
    #: MADs from the peers' median that make a feature stand out
    z_min: float = 6.0
    #: a feature this far out is reported even where the forest, splitting on all features at
    #: random, did not isolate the component (a clock event reason active on one GPU only)
    z_strong: float = 12.0
    #: below this many members a group is judged on z-scores alone
    min_forest: int = 16
    trees: int = 100
    #: the forest's share of rows it may call isolated (an upper bound; z_min decides)
    contamination: float = 0.05
    seed: int = 0
    #: the least relative spread assumed among peers (1% of the median): identical readings
    #: would otherwise make any difference infinitely many MADs
    rel_floor: float = 0.01
    #: the least spread assumed for a counter's rate (per second): a few replays or corrected
    #: errors a minute are noise on any part, however quiet its peers
    rate_floor: float = 0.05


@dataclass
class Outlier:
    target: str
    score: float                      # the forest's anomaly score (higher: more isolated)
    features: list[tuple[str, float, float, float]] = field(default_factory=list)
    # (name, value, peers' median, z)


def health_vectors(records: Iterable[HealthRecord], t_lo: int,
                   t_hi: int) -> dict[str, dict[str, float]]:
    """Per component, its features over ``[t_lo, t_hi]``: the mean of each gauge, the rate per
    second of each counter (first to last reading in the window), and the share of samples
    each clock event reason was active in."""
    samples: dict[str, list[HealthRecord]] = {}
    for r in records:
        if not r.event and t_lo <= r.t_ns <= t_hi:
            samples.setdefault(r.target, []).append(r)
    out: dict[str, dict[str, float]] = {}
    for target, recs in samples.items():
        recs.sort(key=lambda r: r.t_ns)
        gauges: dict[str, list[float]] = {}
        first: dict[str, tuple[int, float]] = {}
        last: dict[str, tuple[int, float]] = {}
        reasons: dict[str, int] = {}
        for r in recs:
            for k, v in r.values.items():
                if k in _SKIP:
                    continue
                if is_counter(k):
                    first.setdefault(k, (r.t_ns, v))
                    last[k] = (r.t_ns, v)
                else:
                    gauges.setdefault(k, []).append(v)
            for reason in r.reasons:
                reasons[reason] = reasons.get(reason, 0) + 1
        vec = {k: float(np.mean(v)) for k, v in gauges.items()}
        for k, (t1, v1) in last.items():
            t0, v0 = first[k]
            vec[f"{k}_per_s"] = max(v1 - v0, 0.0) / ((t1 - t0) / S) if t1 > t0 else 0.0
        for reason, n in reasons.items():
            vec[f"reason_{reason}"] = n / len(recs)
        out[target] = vec
    return out


class PeerModel:
    """Judges one group of like components at a time (:meth:`outliers`), or every group of a
    job's vectors (:meth:`findings`)."""

    def __init__(self, config: PeerConfig | None = None) -> None:
        self.config = config or PeerConfig()

    def matrix(self, vectors: dict[str, dict[str, float]]) -> tuple[list[str], list[str],
                                                                     np.ndarray]:
        """Rows (targets), columns (features at least half the rows have; reasons always) and
        values, a missing one filled with the column's median."""
        targets = sorted(vectors)
        counts: dict[str, int] = {}
        for vec in vectors.values():
            for k in vec:
                counts[k] = counts.get(k, 0) + 1
        names = sorted(k for k, n in counts.items()
                       if n * 2 >= len(targets) or k.startswith("reason_"))
        x = np.full((len(targets), len(names)), np.nan)
        col = {k: j for j, k in enumerate(names)}
        for i, t in enumerate(targets):
            for k, v in vectors[t].items():
                j = col.get(k)
                if j is not None:
                    x[i, j] = v
        for j, k in enumerate(names):
            missing = np.isnan(x[:, j])
            if missing.any():
                # a reason a component never showed was never active on it
                fill = 0.0 if k.startswith("reason_") else float(np.nanmedian(x[:, j]))
                x[missing, j] = fill
        return targets, names, x

    def outliers(self, vectors: dict[str, dict[str, float]]) -> list[Outlier]:
        cfg = self.config
        if len(vectors) < 3:
            return []               # two components cannot say which one is odd
        targets, names, x = self.matrix(vectors)
        med = np.median(x, axis=0)
        mad = 1.4826 * np.median(np.abs(x - med), axis=0)
        floor = np.maximum(cfg.rel_floor * np.abs(med), 1e-9)
        # a reason active on a few components only has MAD 0; its floor is the share itself
        floor = np.where([n.startswith("reason_") for n in names], 0.05, floor)
        floor = np.where([n.endswith("_per_s") for n in names],
                         np.maximum(floor, cfg.rate_floor), floor)
        z = (x - med) / np.maximum(mad, floor)
        standing = np.abs(z) >= cfg.z_min
        candidates = np.flatnonzero(standing.any(axis=1))
        if not len(candidates):
            return []
        scores = np.zeros(len(targets))
        if len(targets) >= cfg.min_forest:
            forest = IsolationForest(n_estimators=cfg.trees, max_samples=min(256, len(targets)),
                                     contamination=cfg.contamination, random_state=cfg.seed)
            # standardized features: the forest splits each one on the same footing
            zc = np.clip(z, -50, 50)
            forest.fit(zc)
            scores = -forest.score_samples(zc)
            isolated = forest.predict(zc) == -1
            strong = (np.abs(z) >= cfg.z_strong).any(axis=1)
            candidates = [i for i in candidates if isolated[i] or strong[i]]
        out = []
        for i in candidates:
            feats = [(names[j], float(x[i, j]), float(med[j]), float(z[i, j]))
                     for j in np.flatnonzero(standing[i])]
            feats.sort(key=lambda f: -abs(f[3]))
            out.append(Outlier(targets[i], float(scores[i]), feats))
        out.sort(key=lambda o: -max(abs(f[3]) for f in o.features))
        return out

    def findings(self, vectors: dict[str, dict[str, float]], t_lo: int,
                 t_hi: int) -> list[Finding]:
        """``peer_outlier`` findings for every group of like components."""
        groups: dict[str, dict[str, dict[str, float]]] = {}
        for target, vec in vectors.items():
            groups.setdefault(component_kind(target), {})[target] = vec
        out = []
        for kind, group in sorted(groups.items()):
            for o in self.outliers(group):
                host = o.target.split("/", 1)[0]
                shown = ", ".join(f"{n} {_fmt(v)} vs {_fmt(m)}" for n, v, m, _ in o.features[:3])
                out.append(Finding(
                    "peer_outlier", o.target, host, t_lo, t_hi, "warning", False,
                    f"unlike its {len(group) - 1} peer {kind}s: {shown} (peers' median)",
                    "compare this component with its peers (nvidia-smi -q, perfquery, PSI); "
                    "drain it if the difference persists",
                    {"score": round(o.score, 3),
                     "features": [{"name": n, "value": v, "peer_median": m, "z": round(z, 1)}
                                  for n, v, m, z in o.features]}))
        return out


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}".rstrip("0").rstrip(".")
