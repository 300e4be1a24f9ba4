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
   ``L`` and the components' optima. A component with a fractional split that stays within
   ``L`` cannot raise the maximum. The even split over the candidates is tried first; where it
   overloads some arcs, a small LP re-splits only the commodities near them (the rest keep the
   even split). Only components where neither stays within ``L`` get their full LP
   (``scipy.optimize.linprog``, HiGHS). On a uniform leaf/spine fabric the even split meets the
   cut bound, and with failed links the local re-split does, so t* = L is certified without a
   large LP even at 2,048 hosts x 8 rails.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
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
    cap = np.asarray(p.cap, dtype=float)
    fixed = _fixed_loads(p)
    com = _Commodities(p)
    limit_fixed = float((fixed / cap).max(initial=0.0))
    cut, unsplit = com.cut_bounds(fixed, cap)
    cut = max(cut, limit_fixed)
    unsplit = max(unsplit, cut)

    even = fixed.copy()
    for arr, dem in com.groups():
        k, length = arr.shape[1:]
        np.add.at(even, arr.ravel(), np.repeat(dem / k, k * length))
    limit = cut * (1 + 1e-7) + TOL
    hot = np.flatnonzero(even / cap > limit)
    value, solved = cut, 0
    if len(hot):
        labels = com.components(len(p.arcs))
        for comp in np.unique(labels[hot]):
            members = [i for i, key in enumerate(com.keys) if labels[key[0][0]] == comp]
            comp_hot = {int(a) for a in hot if labels[a] == comp}
            keys = com.keys
            if _local_split_fits(keys, com.dem, members, comp_hot, even, cap, limit):
                continue
            solved += 1
            arcs = sorted({a for i in members for path in keys[i] for a in path})
            value = max(value, _lp([keys[i] for i in members], [com.dem[i] for i in members],
                                   arcs, fixed, cap))
    return Bound(value, cut, solved, max(unsplit, value))


def cut_bound(problem: Problem) -> tuple[float, float]:
    """The cut bound ``L`` and its version for whole flows, without the LP: cheap enough to
    give the planner a target at which to stop."""
    cap = np.asarray(problem.cap, dtype=float)
    fixed = _fixed_loads(problem)
    cut, unsplit = _Commodities(problem).cut_bounds(fixed, cap)
    cut = max(cut, float((fixed / cap).max(initial=0.0)))
    return cut, max(unsplit, cut)


def _fixed_loads(p: Problem) -> np.ndarray:
    fixed = np.zeros(len(p.arcs))
    idx = [a for arcs in p.fixed for a in arcs]
    if idx:
        w = np.repeat(np.asarray(p.demand, dtype=float), [len(a) for a in p.fixed])
        np.add.at(fixed, np.asarray(idx, dtype=np.int64), w)
    return fixed


class _Commodities:
    """Flows sharing one candidate list (the same object: the problem builder shares them)
    aggregated, and grouped by shape (candidates x variable arcs) into numpy arrays."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        index: dict[int, int] = {}
        self.keys: list[list[tuple[int, ...]]] = []
        dem: list[float] = []
        count: list[int] = []
        lo: list[float] = []
        hi: list[float] = []
        for f, cs in enumerate(p.cands):
            if not cs[0]:
                continue
            i = index.get(id(cs))
            d = p.demand[f]
            if i is None:
                i = index[id(cs)] = len(self.keys)
                self.keys.append(cs)
                dem.append(0.0)
                count.append(0)
                lo.append(d)
                hi.append(d)
            dem[i] += d
            count[i] += 1
            lo[i], hi[i] = min(lo[i], d), max(hi[i], d)
        self.dem = dem
        self.count, self.lo, self.hi = (np.asarray(x) for x in (count, lo, hi))
        shapes: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, key in enumerate(self.keys):
            shapes[(len(key), len(key[0]))].append(i)
        self._groups = [(np.asarray(ix), np.asarray([self.keys[i] for i in ix], dtype=np.int64))
                        for ix in shapes.values()]
        nodes = {n: i for i, n in enumerate({n for arc in p.arcs for n in arc})}
        flat = [nodes[n] for arc in p.arcs for n in arc]
        self.ends = np.asarray(flat, dtype=np.int64).reshape(-1, 2)
        self.n_nodes = len(nodes)

    def groups(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        dem = np.asarray(self.dem)
        for ix, arr in self._groups:
            yield arr, dem[ix]

    def components(self, n_arcs: int) -> np.ndarray:
        """Component label of each arc: arcs joined by a commodity that can use both."""
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        rows, cols = [], []
        for _, arr in self._groups:
            flat = arr.reshape(len(arr), -1)
            rows.append(np.repeat(flat[:, 0], flat.shape[1]))
            cols.append(flat.ravel())
        r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
        graph = coo_matrix((np.ones(len(r)), (r, c)), shape=(n_arcs, n_arcs))
        return connected_components(graph, directed=False)[1]

    def cut_bounds(self, fixed: np.ndarray, cap: np.ndarray) -> tuple[float, float]:
        """Per node: the demand that must leave (enter) it over variable arcs, over their
        capacity. Candidates are shortest paths, so a node on all of them sits at the same
        position. For whole flows of one size on arcs of one capacity with no fixed load, some
        arc carries at least ceil(flows / arcs) of them."""
        n = self.n_nodes
        best = unsplit = 0.0
        dem = np.asarray(self.dem)
        for end in (0, 1):
            demand, flows = np.zeros(n), np.zeros(n)
            lo, hi = np.full(n, np.inf), np.full(n, -np.inf)
            pair_node, pair_arc = [], []
            for ix, arr in self._groups:
                ends = self.ends[arr, end]                          # (commodities, K, L)
                forced = (ends == ends[:, :1, :]).all(axis=1)       # (commodities, L)
                ci, pos = np.nonzero(forced)
                if not len(ci):
                    continue
                node = ends[ci, 0, pos]
                np.add.at(demand, node, dem[ix[ci]])
                np.add.at(flows, node, self.count[ix[ci]])
                np.minimum.at(lo, node, self.lo[ix[ci]])
                np.maximum.at(hi, node, self.hi[ix[ci]])
                arcs = arr[ci, :, pos]                              # (forced, K)
                pair_node.append(np.repeat(node, arcs.shape[1]))
                pair_arc.append(arcs.ravel())
            if not pair_node:
                continue
            n_all = len(cap)
            pairs = np.unique(np.concatenate(pair_node) * n_all + np.concatenate(pair_arc))
            pn, pa = pairs // n_all, pairs % n_all
            tot_cap, tot_fixed, n_arcs = np.zeros(n), np.zeros(n), np.zeros(n)
            cmin, cmax = np.full(n, np.inf), np.full(n, -np.inf)
            np.add.at(tot_cap, pn, cap[pa])
            np.add.at(tot_fixed, pn, fixed[pa])
            np.add.at(n_arcs, pn, 1)
            np.minimum.at(cmin, pn, cap[pa])
            np.maximum.at(cmax, pn, cap[pa])
            used = n_arcs > 0
            best = max(best, float(((demand + tot_fixed)[used] / tot_cap[used]).max()))
            whole = used & (lo == hi) & (cmin == cmax) & (tot_fixed == 0)
            if whole.any():
                per_arc = np.ceil(flows[whole] / n_arcs[whole] - 1e-9)
                unsplit = max(unsplit, float((per_arc * lo[whole] / cmin[whole]).max()))
        return best, unsplit


def _local_split_fits(keys: Sequence[Sequence[Sequence[int]]], dem: Sequence[float],
                      members: Iterable[int], hot: Iterable[int], even: np.ndarray,
                      cap: np.ndarray, limit: float, rounds: int = 3,
                      max_vars: int = 4000) -> bool:
    """Whether re-splitting only the commodities near the ``hot`` arcs (the others keep their
    even split) brings every arc within ``limit``: if so that split is feasible, the component
    cannot exceed the cut bound, and its (slow, degenerate) full LP is not needed."""
    by_arc: dict[int, list[int]] = defaultdict(list)
    for i in members:
        for a in {a for path in keys[i] for a in path}:
            by_arc[a].append(i)
    chosen = {i for a in hot for i in by_arc[a]}
    for _ in range(rounds):
        if sum(len(keys[i]) for i in chosen) > max_vars:
            return False
        ks = sorted(chosen)
        arcs = sorted({a for i in ks for path in keys[i] for a in path})
        base = even.copy()
        for i in ks:
            share = dem[i] / len(keys[i])
            for path in keys[i]:
                for a in path:
                    base[a] -= share
        if _lp([keys[i] for i in ks], [dem[i] for i in ks], arcs, base, cap) <= limit:
            return True
        chosen |= {j for a in arcs for j in by_arc[a]}
    return False


def _lp(keys: Sequence[Sequence[Sequence[int]]], dem: Sequence[float], arcs: Sequence[int],
        fixed: np.ndarray, cap: np.ndarray) -> float:
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
