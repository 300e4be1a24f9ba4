"""Choose a path for every flow to minimize the maximum link load, then the number of links at
that load; re-plan after failures moving few flows.

A greedy pass places flows, largest first, on the candidate with the least resulting maximum
(then sum) of utilisation. A repair pass then takes each directed link at the maximum and moves a
flow off it: directly if some other candidate stays below the maximum, or by an *ejection chain*
when the new path would bring one (failing that, two) other links to the maximum, each of which
then sheds a flow the same way (on a leaf/spine fabric this is the Kempe-chain swap of bipartite
edge colouring, which reaches the optimum for equal flows). Only the variable links of each flow
are touched (see ``problem``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from c4.settings import at_least, non_negative, positive, setting, validate
from traffic_planner.bound import cut_bound
from traffic_planner.coloring import colour
from traffic_planner.errors import ConfigError
from traffic_planner.problem import Problem

log = logging.getLogger(__name__)

REL = 1e-9   # loads within this relative distance count as equal
MAX_OVER = 2  # a chain step may overload at most this many arcs, each then sheds a flow

# a move of a flow onto its candidate k: (arcs it overloads, not onto freed arcs, the worst
# utilization it leaves, k, the overloaded arcs); the first four order the moves tried
_Option = tuple[int, bool, float, int, list[int]]


@dataclass(frozen=True)
class SolverConfig:
    """Knobs of the repair pass. ``depth``: longest ejection chain; ``budget``: candidate moves
    tried per link to relieve; ``seconds``: stop repairing after this long."""

    #: two stack frames per step: stays within Python's default limit
    depth: int = setting(300, check=non_negative)
    budget: int = setting(2000, check=at_least(1))
    seconds: float = setting(10.0, check=positive)

    def __post_init__(self) -> None:
        validate(self, ConfigError)


@dataclass
class Solution:
    choice: list[int]        # flow -> candidate index into problem.cands[flow]
    max_load: float
    at_max: int              # directed links at max_load
    moved: int = 0           # re-plans: flows whose path differs from the previous plan's


class _State:
    def __init__(self, p: Problem) -> None:
        self.p = p
        self.inv = [1.0 / c for c in p.cap]
        self.load = [0.0] * len(p.cap)
        self.on: dict[int, set[int]] = {}
        self.choice = [-1] * len(p.flows)
        self.journal: list[tuple[int, int]] = []
        self.prefer: set[int] = set()
        self.max_over = 1
        for f, arcs in enumerate(p.fixed):
            d = p.demand[f]
            for a in arcs:
                self.load[a] += d

    def put(self, f: int, k: int) -> None:
        d, load, on = self.p.demand[f], self.load, self.on
        for a in self.p.cands[f][k]:
            load[a] += d
            s = on.get(a)
            if s is None:
                on[a] = {f}
            else:
                s.add(f)
        self.choice[f] = k

    def take(self, f: int) -> None:
        d, load, on = self.p.demand[f], self.load, self.on
        for a in self.p.cands[f][self.choice[f]]:
            load[a] -= d
            on[a].discard(f)
        self.choice[f] = -1

    def move(self, f: int, k: int) -> None:
        """Move flow ``f`` to candidate ``k``, noting the old one so a chain can be undone."""
        self.journal.append((f, self.choice[f]))
        self.take(f)
        self.put(f, k)

    def rollback(self, mark: int) -> None:
        while len(self.journal) > mark:
            f, k = self.journal.pop()
            self.take(f)
            self.put(f, k)

    def util_max(self) -> float:
        return max((ld * i for ld, i in zip(self.load, self.inv, strict=True)), default=0.0)

    def greedy(self, flows: Sequence[int]) -> None:
        load, inv, dem, cands = self.load, self.inv, self.p.demand, self.p.cands
        for f in sorted(flows, key=lambda f: -dem[f]):
            cs = cands[f]
            best, best_key = 0, (float("inf"), float("inf"))
            if len(cs) > 1 and len(cs[0]) == 2:
                # The common case (a leaf picking a spine: up and down arc), unrolled.
                d = dem[f]
                for k, (a1, a2) in enumerate(cs):
                    u1, u2 = (load[a1] + d) * inv[a1], (load[a2] + d) * inv[a2]
                    key = (u1, u1 + u2) if u1 > u2 else (u2, u1 + u2)
                    if key < best_key:
                        best, best_key = k, key
            elif len(cs) > 1:
                d = dem[f]
                for k, arcs in enumerate(cs):
                    m = s = 0.0
                    for a in arcs:
                        u = (load[a] + d) * inv[a]
                        s += u
                        if u > m:
                            m = u
                    if (m, s) < best_key:
                        best, best_key = k, (m, s)
            self.put(f, best)

    # ----- repair -------------------------------------------------------------------------
    def repair(self, target: float, cfg: SolverConfig, prefer: Collection[int] = (),
               settle: bool = False) -> None:
        """Lower the maximum load, then the number of links at it. With ``settle`` (a re-plan,
        which keeps moves few) only lower the maximum: stop at ``target``, and undo the moves
        made after the maximum last fell."""
        deadline = time.perf_counter() + cfg.seconds
        self.prefer = set(prefer)
        last, mark = float("inf"), len(self.journal)
        while time.perf_counter() < deadline:
            top = self.util_max()
            if top < last * (1 - REL):
                last, mark = top, len(self.journal)
            optimal = top <= target * (1 + REL) + 1e-12
            if optimal and settle:
                break
            thr = top * (1 - REL)
            inv, load = self.inv, self.load
            # At the bound the maximum cannot fall, but fewer links may sit at it; a link
            # carrying a single flow there cannot shed it (short of a bigger link), so skip it.
            crit = [a for a, s in self.on.items()
                    if s and load[a] * inv[a] >= thr and not (optimal and len(s) < 2)]
            stuck = progress = False
            for a in crit:
                if load[a] * inv[a] < thr:
                    continue
                # Single-arc ejections first (the fast Kempe chains of equal flows); then allow a
                # move to overload two arcs, which uneven flows on parallel paths need.
                # Once the maximum cannot fall (at the bound, or some link at it is stuck), only
                # the count of links at it can: worth a smaller search.
                budget = cfg.budget // 8 if optimal or stuck else cfg.budget
                self.max_over = 1
                fixed = self._fix(a, thr, cfg.depth, set(), [budget], (), set())
                if not fixed:
                    self.max_over = MAX_OVER
                    fixed = self._fix(a, thr, cfg.depth, set(), [budget], (), set())
                if fixed:
                    progress = True
                else:
                    stuck = True
                    if settle:      # the maximum cannot fall at this level: nothing to keep
                        break
                if time.perf_counter() > deadline:
                    log.info("repair stopped at its time limit (%.1f s)", cfg.seconds)
                    break
            if stuck or not progress:
                break
        if settle:
            # Keep only the moves that lowered the maximum; those that merely thinned the links
            # at the final maximum are not worth moving flows for.
            self.rollback(mark)

    def _fix(self, a: int, thr: float, depth: int, chain: set[int], budget: list[int],
             freed: Collection[int], fixing: set[int]) -> bool:
        """Bring arc ``a`` below ``thr`` by moving one flow off it, ejecting in turn a flow from
        the one arc that move overloads (depth-first, ``budget[0]`` moves at most). Moves onto
        ``freed`` arcs (just vacated by the chain) come first: that is the Kempe swap."""
        p = self.p
        need = self.load[a] - thr / self.inv[a]
        flows = [g for g in self.on.get(a, ()) if g not in chain and p.demand[g] > need]
        flows.sort(key=lambda g: (g not in self.prefer, p.demand[g]))
        fixing.add(a)
        try:
            for i, g in enumerate(flows):
                # A fair share of what is left, so that a hopeless flow (one whose every other
                # path is as full) cannot starve the others.
                mine = [budget[0] // (len(flows) - i)]
                budget[0] -= mine[0]
                done = self._move_off(a, g, thr, depth, chain, mine, freed, fixing)
                budget[0] += mine[0]
                if done:
                    return True
            return False
        finally:
            fixing.discard(a)

    def _move_off(self, a: int, g: int, thr: float, depth: int, chain: set[int],
                  budget: list[int], freed: Collection[int], fixing: set[int]) -> bool:
        p, load, inv = self.p, self.load, self.inv
        cur = self.choice[g]
        cs = p.cands[g]
        cur_arcs = cs[cur]
        d = p.demand[g]
        options: list[_Option] = []
        max_over = self.max_over if depth > 0 else 0
        if len(cur_arcs) == 2 and max_over <= 1:
            self._options2(a, cs, cur, d, thr, max_over, freed, fixing, options)
            cs = []
        for k, arcs in enumerate(cs):
            if k == cur or a in arcs:
                continue
            over: list[int] = []
            worst, fresh = 0.0, False
            for b in arcs:
                if b in cur_arcs:
                    continue
                u = (load[b] + d) * inv[b]
                if u >= thr:
                    if len(over) == max_over or b in fixing:
                        break
                    over.append(b)
                if u > worst:
                    worst = u
                if b in freed:
                    fresh = True
            else:
                options.append((len(over), not fresh, worst, k, over))
        options.sort(key=lambda o: o[:4])
        for *_, k, over in options:
            if budget[0] <= 0:
                return False
            budget[0] -= 1
            mark = len(self.journal)
            self.move(g, k)
            if not over:
                return True
            chain.add(g)
            # Each overloaded arc sheds a flow in turn (one ejection often relieves several:
            # the arcs of one path through a spine carry the same flows).
            for b in over:
                if load[b] * inv[b] >= thr and not self._fix(b, thr, depth - 1, chain, budget,
                                                             cur_arcs, fixing):
                    break
            else:
                return True
            chain.discard(g)
            self.rollback(mark)
        return False

    def _options2(self, a: int, cs: list[tuple[int, ...]], cur: int, d: float, thr: float,
                  max_over: int, freed: Collection[int], fixing: set[int],
                  options: list[_Option]) -> None:
        """``_move_off``'s scan of candidates, unrolled for two variable arcs each."""
        load, inv = self.load, self.inv
        c1, c2 = cs[cur]
        for k, (b1, b2) in enumerate(cs):
            if k == cur or b1 == a or b2 == a:
                continue
            # An arc the flow already crosses keeps its load: it cannot become overloaded.
            u1 = 0.0 if b1 in (c1, c2) else (load[b1] + d) * inv[b1]
            u2 = 0.0 if b2 in (c1, c2) else (load[b2] + d) * inv[b2]
            if u1 >= thr:
                if u2 >= thr or not max_over or b1 in fixing:
                    continue
                over = [b1]
            elif u2 >= thr:
                if not max_over or b2 in fixing:
                    continue
                over = [b2]
            else:
                over = []
            options.append((len(over), b1 not in freed and b2 not in freed,
                            u1 if u1 > u2 else u2, k, over))

    def solution(self, moved: int = 0) -> Solution:
        utils = [ld * i for ld, i in zip(self.load, self.inv, strict=True)]
        top = max(utils, default=0.0)
        at_max = sum(1 for u in utils if u >= top * (1 - REL)) if top > 0 else 0
        return Solution(list(self.choice), top, at_max, moved)


def solve(problem: Problem, *, target: float = 0.0, cfg: SolverConfig | None = None) -> Solution:
    """A plan for every flow. ``target``: a lower bound on the max load; repair stops there."""
    st = _State(problem)
    exact = colour(problem)
    if exact is not None:           # equal flows on a full leaf/spine mesh: solved exactly
        for f, k in enumerate(exact):
            st.put(f, k)
        return st.solution()
    # Arcs every candidate crosses bound the maximum too (NIC links, typically).
    target = max(target, st.util_max())
    st.greedy(range(len(problem.flows)))
    st.repair(_target(problem, st, target), cfg or SolverConfig())
    return st.solution()


def _target(problem: Problem, st: _State, target: float) -> float:
    """Where the repair may stop: the given bound, or where the greedy placement is above it,
    the whole-flow cut bound (cheap, and it spares a search for what cannot be had)."""
    if st.util_max() > target * (1 + REL) + 1e-12:
        target = max(target, cut_bound(problem)[1])
    return target


def replan(problem: Problem, previous: Sequence[Sequence[str] | None], *, target: float = 0.0,
           cfg: SolverConfig | None = None) -> Solution:
    """Re-plan after links went down: flows whose previous path (node ids, aligned with
    ``problem.flows``; None for a new flow) survives keep it; the others are placed greedily,
    then repaired, moving the displaced flows first."""
    st = _State(problem)
    target = max(target, st.util_max())
    displaced = []
    for f, old in enumerate(previous):
        k = problem.candidate_of(f, old) if old is not None else None
        if k is None:
            displaced.append(f)
        else:
            st.put(f, k)
    st.greedy(displaced)
    before = list(st.choice)
    st.repair(_target(problem, st, target), cfg or SolverConfig(), prefer=displaced, settle=True)
    gone = set(displaced)
    moved = len(displaced) + sum(1 for f, (b, c) in enumerate(zip(before, st.choice, strict=True))
                                 if b != c and f not in gone)
    return st.solution(moved)
