"""Stragglers from sampled calls: who enters the calls the stream keeps late, and who only waits.

With every call recorded, a rank's own time (outside calls) tells a slow rank from its victims
(``slow``). With one call in K, the time between two kept calls of a rank includes calls left
out, where victims wait: own time is lost. What a kept call still shows is the order its members
came in. Each member's sample is how late it entered against the call's median entry, over the
communicator's pace (its mean time between calls, from progress records: every call counts
there), judged by the same change-point test as own time.

A slow rank is late in every communicator it is in; so are the ranks it holds back, in the
communicators it is not in (its host's other GPUs at the data-parallel all-reduce, the next
pipeline stages at theirs). But in the communicator they share with it they are the ones who
wait: there it alone is late. A rank found late somewhere that waits, in another communicator,
for a member found late there is a victim, and its findings are dropped. Likewise a pipeline
stage slow all along holds back the stages it sends to and receives from: their waits, and their
slower passes, fall at other moments than their peers', so their pace is behind in some buckets
only; a group behind only now and then in the pipeline of a group slow all along is its victim.

Kept calls tell one member's lateness only when the others came together: where more members
are off the median than a fault or two explain, each came late by what it did elsewhere (the
first call after the data-parallel all-reduce follows each GPU's own rail, and some rails'
transfers end late), and that sample (a bucket of kept calls) is no member's evidence. Nor is
a member's lateness at calls where the members of another of its communicators, in their own
groups, were late as well (``colate``: its data-parallel ring ended late for all of them).
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.colate import CoLateness
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.pace import GroupPace, SlowGroup
from diagnosis.engine.placement import Placement
from diagnosis.engine.slow import LatePast, RecStats, SlowRank, judge_rings
from diagnosis.engine.timing import GroupTiming
from diagnosis.engine.waits import WaitBoard, Waited

# the share of a group's pace excess that a member's lateness inside it must reach to explain
# it: a GPU s times slower, computing c between calls that take m, is late by (s-1)c in a pace
# of sc+m, its group behind by (s-1)c over c+m: a ratio of (c+m)/(sc+m), at least 1/s (above
# this up to 6x); a member a little late now and then beside a pace far behind is no slow GPU
_EXPLAINS = 0.15
# a group behind its replicas by this many times another group of its pipeline's excess
# (that one from a change point on) holds that one back (see ``_held_back``)
_DWARFS = 4.0
# ... where that other one is behind from a change point on, or in this share of its buckets
# since its first episode at least
_MOSTLY = 0.5
# members that faults of their own make late in one sample (a slow GPU, or two): a sample in
# which more are off the median is an event of the job or of its network (see
# ``slow._crowded``), no member's evidence
_FAULTS_AT_ONCE = 2
# the job's first seconds, in which a member's lateness makes no episodes (``judge``): ranks
# start, warm their caches and settle, and a group's pace is learnt from its first kept calls
# (it moved between 1.7 and 3.8 ms in a 512-GPU job's first 5 s at K = 64); a GPU late by
# 5-10 % of it in four buckets of those seconds, never after, was filed as slow again and again
_WARM_NS = 5_000_000_000
# the per-group arrays of ``_Rings`` and what a new group's row holds
_RING_FILLS = {"x": np.nan, "a": np.nan, "scale": np.nan, "t": 0, "pos": 0, "acc_x": 0.0,
               "acc_scale": 0.0, "acc_n": 0, "acc_b": -1, "acc_t": 0, "bucket": 0,
               "guessed": False}


class _Rings:
    """Per group of one size: the last ``K`` samples of each member."""

    def __init__(self, n: int, K: int) -> None:
        self.n, self.K = n, K
        self.local: dict[int, int] = {}
        self.groups: list[int] = []
        self.x = np.zeros((0, K, n), dtype=np.float32)
        self.a = np.zeros((0, K, n), dtype=np.float32)
        self.scale = np.zeros((0, K))
        self.t = np.zeros((0, K), dtype=np.int64)
        self.pos = np.zeros(0, dtype=np.int64)
        self.judged = np.zeros(0, dtype=np.int64)       # (see slow.judge_rings)
        self.found: dict[int, list[SlowRank]] = {}
        self.rec_stats: RecStats | None = None      # (see slow.judge_rings)
        self.past = LatePast(n, K)
        # the bucket being filled, per group: sums of lateness and pace, calls, bucket, start
        self.acc_x = np.zeros((0, n))
        self.acc_scale = np.zeros(0)
        self.acc_n = np.zeros(0, dtype=np.int64)
        self.acc_b = np.zeros(0, dtype=np.int64)
        self.acc_t = np.zeros(0, dtype=np.int64)
        self.bucket = np.zeros(0, dtype=np.int64)     # per group, its bucket length (0: unset)
        self.guessed = np.zeros(0, dtype=bool)        # ... chosen before its pace was known
        self._spare = {name: getattr(self, name) for name in _RING_FILLS}

    def add(self, li: np.ndarray, x: np.ndarray, scale: np.ndarray, t: np.ndarray,
            bucket_ns: np.ndarray) -> None:
        """Fold calls (their members' lateness ``x`` over the group's pace ``scale``) into one
        sample per group and time bucket: a group kept many times a second would otherwise fill
        its ring within seconds, before any change shows against a past; its mean over a
        bucket is also steadier than one call (calls right after another are entered at once).
        ``bucket_ns``: per row, its group's bucket length (fixed once chosen), negative where
        its pace is not known yet (a guess, chosen again once it is)."""
        guess = bucket_ns < 0
        # a group first seen before its pace was known (the job's first second, before any
        # progress window closed) would keep that guess, 1 s: four times what four kept calls
        # of a tensor-parallel group span at K = 16, so four times as long for as many
        # samples. The bucket it is filling then becomes the one of its first call.
        redo = (self.bucket[li] <= 0) | (self.guessed[li] & ~guess)
        if redo.any():
            gr = li[redo]
            again = gr[self.bucket[gr] > 0]
            self.bucket[gr] = np.abs(bucket_ns[redo])
            self.guessed[gr] = guess[redo]
            self.acc_b[again] = np.where(self.acc_n[again] > 0,
                                         self.acc_t[again] // self.bucket[again], -1)
        b = t // self.bucket[li]
        o = np.lexsort((t, b, li))
        li, x, scale, t, b = li[o], x[o], scale[o], t[o], b[o]
        head = np.flatnonzero(np.r_[True, (li[1:] != li[:-1]) | (b[1:] != b[:-1])])
        sums = np.add.reduceat(x, head, axis=0)
        cnt = np.diff(np.r_[head, len(li)])
        ssum = np.add.reduceat(scale, head)
        g, bk, t0 = li[head], b[head], t[head]
        # per (group, bucket), in bucket order: a straggling call of a bucket already written
        # is dropped; the bucket being filled takes its calls; a later bucket closes the one
        # before it (written as one sample) and is filled in turn. At once for every group: a
        # Python step per bucket cost a second of a 4,096-GPU trace
        live = bk >= self.acc_b[g]
        g, bk, t0, sums, cnt, ssum = g[live], bk[live], t0[live], sums[live], cnt[live], ssum[live]
        cur = bk == self.acc_b[g]                 # at most one row per group: its first
        gc = g[cur]
        self.acc_x[gc] += sums[cur]
        self.acc_scale[gc] += ssum[cur]
        self.acc_n[gc] += cnt[cur]
        new = ~cur
        g, bk, t0, sums, cnt, ssum = g[new], bk[new], t0[new], sums[new], cnt[new], ssum[new]
        if not len(g):
            return
        first = np.r_[True, g[1:] != g[:-1]]
        last = np.r_[g[1:] != g[:-1], True]
        # the samples written, per group in order: the bucket it was filling (if it has calls),
        # then every new bucket but its last, which it goes on filling
        og = g[first]
        og = og[self.acc_n[og] > 0]
        n_old = self.acc_n[og][:, None]
        mid = ~last
        wg = np.r_[og, g[mid]]
        order = np.r_[np.full(len(og), -1), np.flatnonzero(mid)]
        wx = np.concatenate([self.acc_x[og] / n_old, sums[mid] / cnt[mid][:, None]])
        wscale = np.r_[self.acc_scale[og] / n_old[:, 0], ssum[mid] / cnt[mid]]
        wt = np.r_[self.acc_t[og], t0[mid]]
        if len(wg):
            self._write(wg, order, wx, wscale, wt)
        gl = g[last]
        self.acc_x[gl] = sums[last]
        self.acc_scale[gl] = ssum[last]
        self.acc_n[gl] = cnt[last]
        self.acc_b[gl] = bk[last]
        self.acc_t[gl] = t0[last]

    def _write(self, g: np.ndarray, order: np.ndarray, x: np.ndarray, scale: np.ndarray,
               t: np.ndarray) -> None:
        """Append samples to their groups' rings, in ``order`` within a group."""
        o = np.lexsort((order, g))
        g, x, scale, t = g[o], x[o], scale[o], t[o]
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        counts = np.diff(np.r_[starts, len(g)])
        rank = np.arange(len(g)) - np.repeat(starts, counts)
        total = np.repeat(counts, counts)
        col = (self.pos[g] + rank) % self.K
        self.pos[g[starts]] += counts
        # a group given more than K samples at once keeps its newest K (one write per slot)
        keep = rank >= total - self.K
        g, col = g[keep], col[keep]
        self.past.let_go(g, self.a[g, col])
        self.x[g, col] = x[keep]
        self.a[g, col] = np.clip(x[keep], 0.0, None)
        self.scale[g, col] = scale[keep]
        self.t[g, col] = t[keep]

    def index(self, groups: np.ndarray) -> np.ndarray:
        gs = groups.tolist()
        out = np.fromiter(map(self.local.get, gs, repeat(-1)), np.int64, len(gs))
        for i in np.flatnonzero(out < 0).tolist():
            li = self.local.get(gs[i])     # a group new in this batch may come again in it
            if li is None:
                li = self.local[gs[i]] = len(self.groups)
                self.groups.append(gs[i])
            out[i] = li
        if len(self.groups) > len(self.pos):
            self._grow(len(self.groups))
        return out

    def _grow(self, size: int) -> None:
        """Rows for ``size`` groups. The arrays are views of ones with room to spare, grown
        by doubling: growing them at each new group copied every ring once per batch of new
        groups (quadratic; a second and more while a 131,072-rank job's groups appear)."""
        if size > len(self._spare["pos"]):
            cap = max(size, 2 * len(self._spare["pos"]), 64)
            for name, fill in _RING_FILLS.items():
                old = self._spare[name]
                arr = np.full((cap, *old.shape[1:]), fill, dtype=old.dtype)
                arr[:len(old)] = old
                self._spare[name] = arr
        for name in _RING_FILLS:
            setattr(self, name, self._spare[name][:size])


class SampledStragglers:
    def __init__(self, arena: Arena, timing: GroupTiming, config: EngineConfig,
                 placement: Placement | None = None) -> None:
        self.arena, self.timing, self.cfg = arena, timing, config
        self.placement = placement      # hosts of ranks, where known (see _downstream)
        self.rings: dict[int, _Rings] = {}
        self.sample = 1      # the stream's sampling factor (``Engine.set_sample``)
        self.pace = GroupPace(arena, config)
        self.waits = WaitBoard(arena, config)
        self.colate = CoLateness(arena)
        self._chain: dict[int, int] = {}     # (see _chains)
        self._chain_known = -1
        self._first_ns: int | None = None     # the first kept call's entry (see ``_WARM_NS``)

    def update(self, fin: Finished) -> None:
        """Take finished kept calls (collectives and send/recv channels alike)."""
        n = fin.enter.shape[1]
        if n < 2 or not len(fin.group):
            return
        ring = self.rings.get(n)
        if ring is None:
            ring = self.rings[n] = _Rings(n, self.cfg.history)
        li = ring.index(fin.group)
        late = fin.enter - np.median(fin.enter, axis=1, keepdims=True)
        scale = np.maximum(self._pace(fin.group), float(self.cfg.min_compute_ns))
        t = fin.enter.min(axis=1)
        first = int(t.min())
        if self._first_ns is None or first < self._first_ns:
            self._first_ns = first
        ring.add(li, late / scale[:, None], scale, t, self._bucket(scale))
        coll = ~self.arena.p2p[fin.group]
        self.colate.add(fin.group[coll], fin.seq[coll], late[coll] / scale[coll, None])
        self.pace.update(fin)

    def _late_by(self, g: int, since: int) -> float:
        """How late the latest member of group ``g`` has come to its kept calls since
        ``since`` (its median lateness, in the group's pace), found by the test or not yet."""
        ring = self.rings.get(int(self.arena.n[g]))
        li = ring.local.get(g) if ring is not None else None
        if ring is None or li is None:
            return 0.0
        x = ring.x[li][ring.t[li] >= since]
        x = x[~np.isnan(x).any(axis=1)]
        return float(np.median(x, axis=0).max()) if len(x) else 0.0

    def _bucket(self, pace: np.ndarray) -> np.ndarray:
        """The bucket length for groups of this pace: about four kept calls, within a quarter
        of and twice ``straggle_bucket_ns``; while the pace is unknown, that length negated (a
        guess: see ``_Rings.add``)."""
        base = self.cfg.straggle_bucket_ns
        known = pace > self.cfg.min_compute_ns
        want = 4.0 * pace * self.sample
        return np.where(known, np.clip(want, base // 4, 2 * base), -base).astype(np.int64)

    def _pace(self, groups: np.ndarray) -> np.ndarray:
        """Mean time between calls of each group: from progress, else from the kept calls."""
        ug, inv = np.unique(groups, return_inverse=True)
        pace = self.timing.pace(ug) if self.timing.pace is not None \
            else np.full(len(ug), np.nan)
        missing = ~np.isfinite(pace)
        if missing.any():
            pace[missing] = self.timing.median_period(ug[missing])
        return np.nan_to_num(pace, nan=0.0)[inv.ravel()]

    def _chains(self) -> dict[int, int]:
        """Per rank, its chain of point-to-point transfers (the ranks linked to it through
        send/recv channels, one hop or several: the stages of its pipeline), as the smallest
        rank of the chain; kept while no communicator is added."""
        known = len(self.arena.members)
        if self._chain_known == known:
            return self._chain
        parent: dict[int, int] = {}

        def root(r: int) -> int:
            while parent.setdefault(r, r) != r:
                parent[r] = parent[parent[r]]
                r = parent[r]
            return r
        for g in np.flatnonzero(self.arena.p2p[:known]).tolist():
            a, b = (root(int(r)) for r in self.arena.members[g].tolist())
            if a != b:
                parent[max(a, b)] = min(a, b)
        self._chain = {r: root(r) for r in list(parent)}
        self._chain_known = known
        return self._chain

    def _held_back(self, paced: list[SlowGroup], found: list[SlowRank]) -> set[int]:
        """Groups that a group slow all along holds back through point-to-point transfers:
        a slow pipeline stage (behind from a change point on or from the first bucket, or with
        a member late from a change point on) makes the stages it exchanges with wait for it,
        one hop or several. Their pace then falls behind their peers' in some buckets and not
        others (their waits, and their slower passes, fall at other times than their peers'),
        which is no fault of their own: a group behind only again and again in such a chain is
        that stage's victim. A group behind all along is judged on its own."""
        chain = self._chains()
        if not chain:
            return set()

        def chains_of(g: int) -> set[int]:
            return {chain[r] for r in self.arena.members[g].tolist() if r in chain}
        # a stage far behind slows its neighbours' passes a little as well (they wait for it
        # at other moments than their replicas do), from the same onset: a group behind from
        # a change point far less than another of its pipeline is that one's victim. That one
        # may be behind in most of its buckets rather than from a change point (a host slow
        # from the first iteration: no change, and the buckets where it seems on time are
        # those its replicas waited for it in most spans)
        steady = [sg for sg in paced if sg.duty is None]
        mostly = [sg for sg in paced if sg.duty is None or sg.duty >= _MOSTLY]
        dwarfed = {sg.group for sg in steady if any(
            o.excess >= _DWARFS * sg.excess and chains_of(o.group) & chains_of(sg.group)
            for o in mostly if o is not sg)}
        # (a victim so found holds no one back)
        lasting = {sg.group for sg in steady if sg.group not in dwarfed} \
            | {f.group for f in found if f.duty is None and not self.arena.p2p[f.group]}
        slow_chains = set().union(*(chains_of(g) for g in lasting))
        return dwarfed | {sg.group for sg in paced if sg.duty is not None
                          and sg.group not in lasting and chains_of(sg.group) & slow_chains}

    def _on_one_host(self, g: int) -> bool:
        """Whether every member of group ``g`` is on one known host."""
        if self.placement is None:
            return False
        hosts = {self.placement.host(r) for r in self.arena.members[g].tolist()}
        return len(hosts) == 1 and None not in hosts

    def _waited(self, waited: list[Waited], seen: list[tuple[int, int]]) -> list[SlowRank]:
        """Members their peers wait for at progress snapshots (``waits``), as late members
        of those communicators: the share of the time their peers wait for them, over what
        remains, is their excess."""
        if not waited:
            return []
        # a pipeline stage after a slow one in its backward pass starts its last backward
        # late: its replicas then wait for it at the data-parallel all-reduce, while it
        # computes, not in any call. In each pipeline chain one is the cause and the others
        # its victims: the one its pipeline neighbours wait for (beyond its replicas), then
        # the first one waited for, the strongest first among those (a stage far down the
        # pipeline gathers every delay before it: it may come first)
        chain = self._chains()

        def chain_of(w: Waited) -> int:
            return chain.get(w.rank, -1 - w.rank)     # (a rank in no pipeline: its own)
        first: dict[int, Waited] = {}
        for w in sorted(waited, key=lambda w: (-self.waits.held(w.rank, w.group), w.onset_ns,
                                               w.logp)):
            first.setdefault(chain_of(w), w)
        # a stage the other detectors found slow (from the first sample, say: no change point
        # in waits) comes before the stages it holds back
        before: dict[int, tuple[int, int]] = {}
        for rank, onset in seen:
            c = chain.get(rank)
            if c is not None and onset < before.get(c, (1 << 62, -1))[0]:
                before[c] = (onset, rank)
        waited = [w for w in waited if first[chain_of(w)] is w
                  and not (chain_of(w) in before and before[chain_of(w)][1] != w.rank
                           and before[chain_of(w)][0] <= w.onset_ns)]
        pace = self._pace(np.asarray([w.group for w in waited], dtype=np.int64))
        out = []
        for w, p in zip(waited, pace.tolist(), strict=True):
            excess = w.share / max(1.0 - w.share, 0.05)
            out.append(SlowRank(w.rank, w.group, w.onset_ns, excess, excess * p, w.count,
                                w.hits / max(w.count, 1), 0.0, w.logp,
                                waits=(w.hits, w.count, w.snapshots)))
        return out

    def judge(self) -> list[SlowRank]:
        """The late members, and the members of groups whose pace fell behind with none of
        them late (a slow host), without those that are only victims of another."""
        warm = 0 if self._first_ns is None else self._first_ns + _WARM_NS
        found = judge_rings(list(self.rings.values()), self.arena, self.cfg,
                            self.cfg.straggle_min_excess, crowd=_FAULTS_AT_ONCE,
                            min_shift=self.cfg.straggle_min_shift, episodes_from_ns=warm)
        # a send/recv channel's kept transfers fall at different points of the pipeline's
        # schedule (filling it, its steady state, draining it), where either side may wait for
        # the other: which side enters later, and by how much, changes from one kept transfer
        # to the next with no fault, so one side late again and again there is no evidence (a
        # GPU slow now and then is late in its collectives, which show it); a level that
        # changes from some moment on still is
        found = [f for f in found if f.duty is None or not self.arena.p2p[f.group]]
        # late at calls where its data-parallel ring (or another communicator of its) ended
        # late for every member: the ring's doing (see ``colate``), no evidence on the GPU
        found = [f for f in found if self.arena.p2p[f.group]
                 or not self.colate.shared(f.rank, f.group, f.excess / 2)]
        paced = self.pace.judge()
        seen = [(f.rank, f.onset_ns) for f in found] + [
            (r, sg.onset_ns) for sg in paced for r in self.arena.members[sg.group].tolist()]
        found += self._waited(self.waits.judge(), seen)
        # per group, its late members and the most time one of them kept it waiting (its
        # lateness, times the share of its samples it was late in when only now and then)
        late_in: dict[int, set[int]] = {}
        held_for: dict[int, float] = {}
        for f in found:
            late_in.setdefault(f.group, set()).add(f.rank)
            kept = f.excess * (1.0 if f.duty is None else f.duty)
            held_for[f.group] = max(held_for.get(f.group, 0.0), kept)
        # per member: how late it came, found late from a change point on (a level), and
        # found late again and again (episodes)
        lasting: dict[int, float] = {}
        late_by: dict[int, float] = {}
        # the same of members late inside their groups' calls, which alone explain a group's
        # pace: peers waiting for a member at snapshots (``waits``) is what a group behind
        # shows too
        inside_by: dict[int, float] = {}
        inside_lasting: dict[int, float] = {}
        for f in found:
            late_by[f.rank] = max(late_by.get(f.rank, 0.0), f.excess)
            if f.duty is None:
                lasting[f.rank] = max(lasting.get(f.rank, 0.0), f.excess)
            if f.waits is None:
                inside_by[f.rank] = max(inside_by.get(f.rank, 0.0), f.excess)
                if f.duty is None:
                    inside_lasting[f.rank] = max(inside_lasting.get(f.rank, 0.0), f.excess)
        unexplained: set[int] = set()
        behind: list[SlowRank] = []
        held = self._held_back(paced, found)
        for sg in paced:
            if sg.group in held:
                continue        # a victim of its pipeline's slow stage (see _held_back)
            members = self.arena.members[sg.group].tolist()
            # a member late inside it explains its pace (a slow GPU) unless far too little; a
            # pace behind from a change point on is held back all along, which a member late
            # only now and then (a few pauses) does not explain, unless each of the pace's
            # buckets spans several iterations (kept calls K apart): a GPU slow in one
            # iteration of two or three then holds back every bucket
            mine = inside_by if sg.duty is not None or self.pace.wide else inside_lasting
            # (a member its own test found late explains it by its lateness alone; one not
            # found must be late by more than the test's least excess: once a ring holds no
            # sample from before the onset, a GPU a tenth slower is found late by less)
            found_by = max((mine.get(r, 0.0) for r in members), default=0.0)
            seen_by = self._late_by(sg.group, sg.onset_ns)
            if found_by >= _EXPLAINS * sg.excess > 0 \
                    or seen_by >= max(self.cfg.straggle_min_excess, _EXPLAINS * sg.excess):
                continue
            unexplained.add(sg.group)
            pace = float(self._pace(np.asarray([sg.group]))[0])
            behind += [SlowRank(r, sg.group, sg.onset_ns, sg.excess, sg.excess * pace,
                                sg.samples, sg.frac, 0.0, sg.logp, duty=sg.duty,
                                episodes=sg.episodes, every_ns=sg.every_ns, whole_group=True)
                       for r in members]
        # the members of a group behind as a whole are judged by its pace: what else they
        # were found late in (its pauses, the waits it imposed) would tell another onset
        covered = {f.rank for f in behind}
        found = [f for f in found if f.rank not in covered] + behind
        # the members of a group waited for its late members, unless those do not explain
        # why the group as a whole fell behind, or why a member is late elsewhere: a GPU
        # late a little now and then in its tensor-parallel group does not make its host's
        # other GPUs the ones their replicas wait for most of the time (a slow host)
        victims: set[int] = set()
        for g, late_members in late_in.items():
            if g not in unexplained:
                victims.update(r for r in self.arena.members[g].tolist()
                               if r not in late_members
                               and held_for[g] >= _EXPLAINS * late_by.get(r, 0.0))
        found = [f for f in found if f.rank not in victims]
        return self._downstream(found, paced)

    def _downstream(self, found: list[SlowRank], paced: list[SlowGroup]) -> list[SlowRank]:
        """Without the findings of ranks a slow group holds back through their pipeline. A
        group behind its replicas (a slow host), or a host's group with a member late inside
        it (a slow GPU, which its host-mates wait for at every call), delays every stage its
        pipelines feed: each rank of those stages comes late against its replicas in their
        data-parallel calls, as it would if it were slow itself. Such a finding is dropped when
        the rank's pipeline holds a member of such a group, the rank is in none, and most of
        the others in the call it is late in have no such member in their pipelines (it is
        late against ranks nobody holds back). A GPU slow of its own in a held-back stage is
        still late against its tensor-parallel peers, whose pipelines are held back as much:
        that finding stays. Every group behind counts, also one taken for a victim
        (``_held_back``): once a slow host's ring holds no sample from before its onset, its
        pace is judged behind again and again rather than from a change point on, and the
        ranks it holds back are found late from then on."""
        cause = {r for sg in paced for r in self.arena.members[sg.group].tolist()}
        for f in found:
            if not self.arena.p2p[f.group] and self._on_one_host(f.group):
                cause.update(self.arena.members[f.group].tolist())
        if not cause or not found:
            return found
        chain = self._chains()
        held_chains = {chain[r] for r in cause if r in chain}
        out = []
        for f in found:
            c = chain.get(f.rank)
            if f.rank in cause or c not in held_chains or self.arena.p2p[f.group]:
                out.append(f)
                continue
            others = [r for r in self.arena.members[f.group].tolist() if r != f.rank]
            free = sum(chain.get(r) not in held_chains for r in others)
            if 2 * free <= len(others):
                out.append(f)
        return out
