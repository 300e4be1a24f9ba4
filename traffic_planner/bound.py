"""A lower bound on the maximum link load: the optimum of the fractional multicommodity flow
over the flows' candidate (equal-cost) paths.

What is computed: ``t* = min t`` such that every flow's demand is split, in any fractions, over
its candidate paths and every directed link carries at most ``t`` times its capacity. No
unsplittable plan over the same candidates can do better, so ``plan / t*`` bounds the planner's
gap. It is found without solving one huge linear program:

1. Flows with the same set of variable links per candidate (``problem``) are one commodity, their
   demands summed: splitting the sum is the same as splitting each (exact).
2. A cut bound ``L``: the fixed load of every link, and for every node the demand that must
   leave (enter) it over variable links divided by the capacity of those links. ``L <= t*``.
3. Commodities that share no variable link form independent components; t* is the largest of
   ``L`` and the components' optima. A component whose even split over its candidates already
   stays within ``L`` cannot raise the maximum, so only the others go to the LP
   (``scipy.optimize.linprog``, HiGHS). On a uniform leaf/spine fabric the even split meets the
   cut bound, so t* = L exactly and no LP is solved even at 2,048 hosts x 8 rails.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from traffic_planner.errors import PlannerError
from traffic_planner.problem import Problem

log = logging.getLogger(__name__)
TOL = 1e-9


@dataclass(frozen=True)
class Bound:
    value: float        # t*, the fractional optimum
    cut: float          # the cut bound L (<= value)
    lp_components: int  # components that needed the LP
    unsplittable: float  # a bound for unsplittable equal flows (>= value where it applies)


def lower_bound(problem: Problem) -> Bound:
    p = problem
    n_arcs = len(p.arcs)
    cap = np.asarray(p.cap, dtype=float)
    fixed = np.zeros(n_arcs)
    for f, arcs in enumerate(p.fixed):
        for a in arcs:
            fixed[a] += p.demand[f]
    commodities: dict[tuple[tuple[int, ...], ...], list[int]] = defaultdict(list)
    for f, cs in enumerate(p.cands):
        if len(cs) > 1 or cs[0]:
            commodities[tuple(cs)].append(f)
    keys = list(commodities)
    dem = [sum(p.demand[f] for f in commodities[k]) for k in keys]

    cut, unsplit = _cut_bounds(p, keys, commodities, dem, fixed, cap)
    cut = max(cut, float((fixed / cap).max(initial=0.0)))

    # Components: commodities linked by shared variable links (union-find over links).
    parent = list(range(n_arcs))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for key in keys:
        arcs = [a for path in key for a in path]
        r = find(arcs[0])
        for a in arcs[1:]:
            ra = find(a)
            if ra != r:
                parent[ra] = r
    comps: dict[int, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        comps[find(key[0][0] if key[0] else next(a for p_ in key for a in p_))].append(i)

    even = fixed.copy()
    for i, key in enumerate(keys):
        share = dem[i] / len(key)
        for path in key:
            for a in path:
                even[a] += share
    even_util = even / cap
    value, solved = cut, 0
    for members in comps.values():
        arcs = {a for i in members for path in keys[i] for a in path}
        if max(even_util[a] for a in arcs) <= cut * (1 + 1e-7) + TOL:
            continue
        solved += 1
        value = max(value, _lp([keys[i] for i in members], [dem[i] for i in members],
                               sorted(arcs), fixed, cap))
    return Bound(value, cut, solved, max(unsplit, value))


def _cut_bounds(p: Problem, keys, commodities, dem, fixed, cap) -> tuple[float, float]:
    """Per node: demand forced out of (into) it over variable links / their capacity. Also the
    unsplittable version where every such flow has the same demand and link the same capacity:
    some link carries at least ceil(flows / links) of them."""
    best = unsplit = 0.0
    for end in (0, 1):                       # 0: leaving the node (tails), 1: entering (heads)
        demand: dict[str, float] = defaultdict(float)
        count: dict[str, int] = defaultdict(int)
        sizes: dict[str, set[float]] = defaultdict(set)
        arcs_at: dict[str, set[int]] = defaultdict(set)
        for i, key in enumerate(keys):
            members = commodities[key]
            # Candidates are shortest paths: a node on all of them sits at the same position.
            for pos in range(len(key[0])):
                node = p.arcs[key[0][pos]][end]
                if any(p.arcs[c[pos]][end] != node for c in key):
                    continue
                demand[node] += dem[i]
                count[node] += len(members)
                sizes[node].update(p.demand[f] for f in members)
                arcs_at[node].update(c[pos] for c in key)
        for node, d in demand.items():
            arcs = list(arcs_at[node])
            total_cap = float(cap[arcs].sum())
            load = d + float(fixed[arcs].sum())
            best = max(best, load / total_cap)
            caps = {float(cap[a]) for a in arcs}
            if len(sizes[node]) == 1 and len(caps) == 1 and not fixed[arcs].any():
                size = next(iter(sizes[node]))
                unsplit = max(unsplit, math.ceil(count[node] / len(arcs) - 1e-9) * size
                              / caps.pop())
    return best, unsplit


def _lp(keys, dem, arcs, fixed, cap) -> float:
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    row_of = {a: r for r, a in enumerate(arcs)}
    n_vars = sum(len(k) for k in keys) + 1          # x[k, p] ..., then t
    ub_r, ub_c, ub_v, eq_r, eq_c = [], [], [], [], []
    col = 0
    for i, key in enumerate(keys):
        for path in key:
            for a in path:
                ub_r.append(row_of[a])
                ub_c.append(col)
                ub_v.append(dem[i] / cap[a])
            eq_r.append(i)
            eq_c.append(col)
            col += 1
    t = n_vars - 1
    ub_r += list(range(len(arcs)))
    ub_c += [t] * len(arcs)
    ub_v += [-1.0] * len(arcs)
    a_ub = coo_matrix((ub_v, (ub_r, ub_c)), shape=(len(arcs), n_vars)).tocsr()
    b_ub = -np.array([fixed[a] / cap[a] for a in arcs])
    a_eq = coo_matrix(([1.0] * len(eq_c), (eq_r, eq_c)), shape=(len(keys), n_vars)).tocsr()
    c = np.zeros(n_vars)
    c[t] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(len(keys)),
                  bounds=(0, None), method="highs")
    if res.status != 0:
        raise PlannerError(f"the bound's linear program failed: {res.message}")
    log.debug("LP: %d commodities, %d variables, t* = %.6f", len(keys), n_vars, res.fun)
    return float(res.fun)
