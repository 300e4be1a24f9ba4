"""Stalls seen after the fact: a call whose members waited past the hang bound for a late
member and then finished. A recorded trace (and a stream that delivered the call complete)
holds only the finished rows, so the hang detectors never saw it open; the post-mortem must
still list it, as a hang that cleared, from the first member's entry to the last one's."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.reporter import Finding, Reporter
from diagnosis.engine.state import JobState
from diagnosis.engine.wording import ms

#: At most this many stalls judged per batch (a whole job stalled at once is one story told by
#: its first calls; the rest repeat it).
MAX_PER_BATCH = 16
#: Without history, a communicator's first calls are not judged (ranks arrive at them as
#: they finish loading), and at least this many calls of the batch must show its normal skew.
WARMUP_CALLS = 2
MIN_CALLS = 8


class StallsAfterTheFact:
    def __init__(self, state: JobState, reporter: Reporter) -> None:
        self.state, self.reporter = state, reporter
        self.arena, self.timing, self.placement = state.arena, state.timing, state.placement
        self.cfg = state.cfg

    def check(self, rank: np.ndarray, g: np.ndarray, seq: np.ndarray, op: np.ndarray,
              enter: np.ndarray, end: np.ndarray, status: np.ndarray) -> None:
        """File, already cleared, the stalls among the calls whose every member's row is in
        this batch, finished. The rows of a stalled call complete together, so they come
        together (in completion order); the batch is judged before the timing learns from it,
        and only on communicators with history (arrivals at a job's start are skewed by
        loading)."""
        ok = (g >= 0) & (end >= 0) & (status <= 0) & (seq >= 0)
        if not ok.any():
            return
        idx = np.flatnonzero(ok)
        key = g[idx] * (1 << 40) + seq[idx]
        order = np.argsort(key, kind="stable")
        idx, key = idx[order], key[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        counts = np.diff(np.r_[starts, len(key)])
        e = enter[idx]
        first = np.minimum.reduceat(e, starts)
        last = np.maximum.reduceat(e, starts)
        gs = g[idx[starts]]
        cand = np.flatnonzero((counts == self.arena.n[gs])
                              & (last - first > self.cfg.hang_min_ns))
        if not len(cand):
            return
        bound = self.timing.bound(gs[cand])        # (sizes the timing's tables first)
        known = self.timing.count[gs[cand]] > 0
        skew = last - first
        judged = 0
        for j, b, k in zip(cand.tolist(), bound.tolist(), known.tolist(), strict=True):
            if not k:
                # no history before this batch (a trace read in one block): the batch's own
                # calls of that communicator say how far apart its members normally arrive
                same = (gs == gs[j]) & (key[starts] % (1 << 40) >= WARMUP_CALLS)
                if seq[idx[starts[j]]] < WARMUP_CALLS or int(same.sum()) < MIN_CALLS:
                    continue
                b = max(int(self.cfg.hang_factor * float(np.median(skew[same]))),
                        self.cfg.hang_min_ns)
            # (a stall filed earlier in this batch may have shown the wait to be recurring)
            if int(skew[j]) <= max(b, int(self.timing.recurring[gs[j]])):
                continue
            rows = idx[starts[j]: starts[j] + counts[j]]
            self._file(int(gs[j]), int(seq[rows[0]]), int(op[rows[0]]), rank[rows],
                       enter[rows], int(b))
            judged += 1
            if judged >= MAX_PER_BATCH:
                break

    def _file(self, g: int, seq: int, op_id: int, ranks: np.ndarray, enter: np.ndarray,
              bound: int) -> None:
        onset, cleared = int(enter.min()), int(enter.max())
        late = sorted(ranks[enter > onset + bound].tolist())
        # the live hang detectors may have filed it (open or cleared): the same incident
        if not late or self.reporter.covering("noncomm_hang", set(late), onset, cleared):
            return
        self.timing.stall_cleared(g, onset, cleared)
        op = self.state.op_name(op_id)
        name = self.state.label(g)
        who = self.placement.describe_many(late)
        waited = cleared - onset
        summary = (f"{who} entered {op} #{seq} on {name} {ms(waited)} after the first of its "
                   f"peers (the hang bound was {ms(bound)}), then the job went on: a stall "
                   f"that cleared; look at what {'it' if len(late) == 1 else 'they'} did in "
                   "that time (checkpoint, data loading, a paused process)")
        finding = Finding(
            "noncomm_hang", "noncomm_hang:" + ",".join(map(str, late[:8])),
            tuple(self.placement.suspects(late, [0.9] * len(late))), onset, summary,
            pg=self.state.pg_of(g), seq=seq,
            evidence={"group": name, "culprits": late, "waited_ms": round(waited / 1e6, 1),
                      "bound_ms": round(bound / 1e6, 1), "after_the_fact": True},
            culprits=tuple(late))
        rid = self.reporter.file(finding, cleared, renew=True)
        self.reporter.resolve(rid, cleared, "the late rank(s) arrived and the call finished",
                              cleared=True)
