"""A records budget per job: the daemon chooses each job's sampling factor K and window.

What a job sends is measured per kind over the last ``measure_s`` seconds: op rows, progress,
linkstat, port records and raw connection samples as ingested, and the job's full call rate
from its collectors' counters (``CollectorStats.recorded`` and ``t_ns``, which every sidecar
forwards each second) or, without them, the ingested op rows times K. Then:

* **K** is the smallest power of two that brings the full call rate under the part of the
  budget the other kinds leave (``records_per_s`` minus their rate, at least ``ops_floor`` of
  the budget), capped at ``max_sample``. K = 1 while the job fits. Powers of two nest: the calls
  kept at 2K are a subset of those kept at K (``c4.proto.sampling``). K goes up as soon as it must;
  it comes down one step only once the full rate at K/2 would use at most ``lower_at`` of the
  budget, and never within ``hold_s`` of the last change (each change costs a burst of
  announcements and leaves the meters a transition to settle).
* **Windows**: progress and linkstat grow with ranks and connections, not calls, so K cannot
  bound them. When they alone take more than ``1 - ops_floor`` of the budget, or the job is over
  budget with K at its cap, the window doubles (up to ``max_window_s``): both kinds emit at
  most one record per key per window, so their rate halves; it halves again once they would
  use less than a quarter of the budget at the shorter window. The cost: a hang is seen up to
  one window later, and a link's statistics are coarser.
* A job starts at the factor its size calls for (``world_size`` x ``calls_per_rank`` into the
  op rows' share of the budget), as the default of every communicator, and at the window its
  size calls for (``world_size`` x ``windowed_per_rank`` into the rest of the budget), announced
  when its first rank registers: a 16,384-rank job must not ship every call of its first
  seconds, nor a 131,072-rank job 1.3M progress and linkstat records a second before the
  daemon has measured them.
  ``fixed_sample`` makes that default the factor of every job, whatever its size and rate.
* A change of K is announced per communicator as "from seq S on": S is the highest seq seen
  on it plus ``margin_s`` seconds of its calls (its measured pace), so that every member's
  sidecar has the step before its rows reach S and all switch at the same call. A window
  change takes effect at an instant ``margin_s`` ahead, on a multiple of both windows.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from c4.settings import between, non_negative, positive, power_of_two, setting, validate
from diagnosis.errors import ConfigError

NS = 1_000_000_000
KINDS = ("ops", "progress", "linkstat", "port", "conns")


@dataclass(frozen=True)
class BudgetConfig:
    """The daemon's ``--job-records-per-s`` and what goes with it."""

    #: records per second one job may send (every kind); 0: no budget, K stays 1
    records_per_s: float = setting(
        200_000.0, flag="--job-records-per-s", env="C4_JOB_RECORDS_PER_S", check=non_negative,
        help="Records per second one job may send, every kind together. Over it the job's "
             "calls are sampled (K, a power of two, told to its sidecars) and, at "
             "--max-sample, its windows lengthened. 0: no budget (every call, always).")
    #: the largest sampling factor (a power of two)
    max_sample: int = setting(1024, flag="--max-sample", env="C4_MAX_SAMPLE",
                              check=power_of_two(),
                              help="The largest sampling factor K (a power of two).")
    #: a factor for every job whatever its rate (a power of two; 0: by the budget)
    fixed_sample: int = setting(0, flag="--sample", env="C4_SAMPLE",
                                check=power_of_two(zero=True),
                                help="Sample every job's calls at this factor K (a power of "
                                     "two) from its start, whatever its rate; 0: K from the "
                                     "budget.")
    #: calls per second a rank is taken to make until the job is measured: a job whose ranks
    #: would then not fit starts sampled (its default factor), rather than flooding the daemon
    #: with every call of its first seconds; 0: every job starts at K = 1
    calls_per_rank: float = setting(
        400.0, flag="--calls-per-rank", env="C4_CALLS_PER_RANK", check=non_negative,
        help="Calls per second a rank is taken to make until its job is measured: a job too "
             "large for the budget at that rate starts sampled. 0: every job starts at K = 1.")
    #: the sidecars' default window, and the longest the daemon may set
    window_s: float = setting(1.0, flag="--window", env="C4_WINDOW", check=positive,
                              help="The sidecars' progress/linkstat window (seconds): the one "
                                   "they use until told otherwise.")
    max_window_s: float = setting(16.0, flag="--max-window", env="C4_MAX_WINDOW",
                                  check=positive,
                                  help="The longest window the budget may set (seconds).")
    #: progress keys and connections a rank is taken to report per window until its job is
    #: measured (a Megatron-style rank: its communicators and pipeline peers, and the sockets
    #: under them): a job whose windowed records would then not fit starts with longer windows
    windowed_per_rank: float = setting(10.0, check=non_negative)
    #: share of the budget kept for op rows when windows are chosen
    ops_floor: float = setting(0.5, check=between(0, 1))
    #: K comes down when the full rate at K/2 would use at most this share of the budget
    lower_at: float = setting(0.6, check=between(0, 1))
    #: how far ahead of the fastest member a change takes effect
    margin_s: float = setting(5.0, check=positive)
    #: no change within this long of the last
    hold_s: float = setting(15.0, check=positive)
    #: rates are measured over this long
    measure_s: float = setting(10.0, check=positive)

    def __post_init__(self) -> None:
        validate(self, ConfigError)
        if self.window_s > self.max_window_s:
            raise ConfigError(f"--window ({self.window_s:g}) must not exceed --max-window "
                              f"({self.max_window_s:g})")


class RateMeter:
    """Counts per kind in one-second buckets over the last ``span_s`` seconds."""

    def __init__(self, span_s: float) -> None:
        self.span = max(1, math.ceil(span_s))
        self._buckets: deque[tuple[int, dict[str, float]]] = deque()
        self._since: float | None = None

    def add(self, kind: str, n: float, now: float) -> None:
        sec = int(now)
        if self._since is None:
            self._since = now
        if not self._buckets or self._buckets[-1][0] != sec:
            self._buckets.append((sec, {}))
            while self._buckets and self._buckets[0][0] <= sec - self.span:
                self._buckets.popleft()
        counts = self._buckets[-1][1]
        counts[kind] = counts.get(kind, 0.0) + n

    def rate(self, kind: str, now: float) -> float:
        """Per second over the span (or since the first count, if shorter)."""
        if self._since is None:
            return 0.0
        lo = int(now) - self.span
        total = sum(c.get(kind, 0.0) for s, c in self._buckets if s > lo)
        return total / max(min(now - self._since, float(self.span)), 1.0)


@dataclass
class _Pace:
    """A communicator's highest seq seen, and its calls per second."""

    top: int = -1
    t_top: float = 0.0
    anchor: tuple[float, int] | None = None
    rate: float = 0.0

    def see(self, seq: int, now: float, span: float) -> None:
        if seq <= self.top:
            return
        self.top, self.t_top = seq, now
        if self.anchor is None:
            self.anchor = (now, seq)
            return
        t0, s0 = self.anchor
        if now - t0 >= 1.0:
            self.rate = max((seq - s0) / (now - t0), 0.0)
            if now - t0 >= span:
                self.anchor = (now, seq)


@dataclass
class Decision:
    """A new schedule: the job's factor and window and each communicator's steps."""

    version: int
    sample: int
    window_ns: int
    window_from_ns: int
    steps: dict[str, list[tuple[int, int]]]
    new_steps: dict[str, tuple[int, int]] = field(default_factory=dict)
    why: str = ""
    default: int = 1


class JobBudget:
    """The budget of one job attempt: feed it what the job sends, ask it for decisions."""

    def __init__(self, config: BudgetConfig) -> None:
        self.cfg = config
        self.meter = RateMeter(config.measure_s)
        self.sample = 1
        self.default = 1
        self.world = 0       # the job's world size, from its ranks' registrations
        self.window_ns = int(config.window_s * NS)
        self.steps: dict[str, list[tuple[int, int]]] = {}
        self.version = 0
        self._paces: dict[str, _Pace] = {}
        self._last_change: float | None = None
        # rank -> its row of ``_counts`` (-1: none yet), and how many rows are taken
        self._row_of = np.full(0, -1, np.int64)
        self._rows = 0
        # per rank: (anchor t_ns, anchor count, latest t_ns, latest count) of its collector
        self._counts = np.zeros((0, 4), np.int64)
        # kind -> {window end: (records, window length)}
        self._windows: dict[str, dict[int, tuple[int, int]]] = {}
        self._now_ns = 0
        #: the share of the budget the daemon can give now (``LiveView`` lowers it while its
        #: detectors or its store fall behind)
        self.scale = 1.0
        #: the share it could follow: a lower K or shorter windows only within it
        #: (``scheduling.Governor.room``)
        self.room = 1.0

    # -- what the job sends -----------------------------------------------------------------
    def observe(self, kind: str, n: int, now: float) -> None:
        self.meter.add(kind, n, now)

    def observe_windows(self, kind: str, t_ns: np.ndarray, window_ns: np.ndarray | int) -> None:
        """Windowed records (progress, linkstat) by the window they close: the records per
        window are the job's demand, whatever the rate at which they arrive (a daemon that
        falls behind would otherwise measure its own throughput and never lengthen the
        windows that overload it)."""
        if not len(t_ns):
            return
        t = np.asarray(t_ns, dtype=np.int64)
        ends, first, counts = np.unique(t, return_index=True, return_counts=True)
        lengths = np.broadcast_to(np.asarray(window_ns, dtype=np.int64), t.shape)[first]
        seen = self._windows.setdefault(kind, {})
        for end, n, length in zip(ends.tolist(), counts.tolist(), lengths.tolist(),
                                  strict=True):
            total, _ = seen.get(end, (0, length))
            seen[end] = (total + n, max(length, 1))
        if len(seen) > 256:
            for end in sorted(seen)[:-128]:
                del seen[end]

    def _window_rate(self, kind: str) -> float | None:
        """Records per second of the busiest window of the last ``measure_s`` of data time,
        among the windows of the current length (older ones say nothing of it)."""
        seen = self._windows.get(kind)
        if not seen:
            return None
        latest = max(seen)
        recent = [n * NS / w for end, (n, w) in seen.items()
                  if end >= latest - self.cfg.measure_s * NS and w == self.window_ns]
        return max(recent) if recent else None

    def _settled(self) -> bool:
        """Whether the windowed kinds have been seen at the current window length for a
        measuring span of data time: a daemon behind its stream judges a window change only
        on data from after it (else it would lengthen the windows again and again)."""
        for seen in self._windows.values():
            ends = [end for end, (_, w) in seen.items() if w == self.window_ns]
            if ends and max(ends) - min(ends) >= self.cfg.measure_s * NS:
                return True
        # none seen yet: a window chosen from the job's size waits for them (else it would
        # come back down on the first pass, measuring nothing)
        return not self._windows and self.window_ns == int(self.cfg.window_s * NS)

    def observe_seqs(self, tops: dict[str, int], now: float) -> None:
        """The highest seq seen per communicator in a batch (op rows or progress)."""
        for pg, seq in tops.items():
            pace = self._paces.get(pg)
            if pace is None:
                pace = self._paces[pg] = _Pace()
            pace.see(seq, now, self.cfg.measure_s)

    def recorded(self, ranks: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray,
                 t_ns: Sequence[int] | np.ndarray) -> None:
        """Collectors' cumulative counts of calls recorded (distinct ranks), each as of its
        ``t_ns`` on its own clock. Each rank's rate is its count's growth over its own
        timestamps (exact, whatever the delays on the way), between an anchor and its latest
        report; the anchor moves up once it is two measuring spans old."""
        n = np.asarray(counts, np.int64)
        t = np.asarray(t_ns, np.int64)
        rows = self._rows_of(np.asarray(ranks, np.int64))
        if not len(rows):
            return
        if self._rows > len(self._counts):
            grown = np.full((max(64, 2 * self._rows), 4), -1, np.int64)
            grown[: len(self._counts)] = self._counts
            self._counts = grown
        c = self._counts
        # a new rank, or a restarted collector (a later count that went down): start over;
        # a report older than the latest is stale
        fresh = (c[rows, 0] < 0) | ((t > c[rows, 2]) & (n < c[rows, 3]))
        c[rows[fresh]] = np.stack([t, n, t, n], axis=1)[fresh]
        on = ~fresh & (t > c[rows, 2])
        r, tt, cc = rows[on], t[on], n[on]
        c[r, 2], c[r, 3] = tt, cc
        old = tt - c[r, 0] > 2 * self.cfg.measure_s * NS
        if old.any():
            r = r[old]
            rate = ((c[r, 3] - c[r, 1]) * NS // (c[r, 2] - c[r, 0]))
            c[r, 0] = c[r, 2] - int(self.cfg.measure_s * NS)
            c[r, 1] = c[r, 3] - (rate * self.cfg.measure_s).astype(np.int64)

    def _rows_of(self, ranks: np.ndarray) -> np.ndarray:
        """Each rank's row, new ranks given the next ones (in one step: a 100k-rank job's
        counters arrive every second)."""
        if not len(ranks):
            return ranks
        top = int(ranks.max())
        if top >= len(self._row_of):
            grown = np.full(max(64, 2 * len(self._row_of), top + 1), -1, np.int64)
            grown[: len(self._row_of)] = self._row_of
            self._row_of = grown
        new = np.unique(ranks[self._row_of[ranks] < 0])
        self._row_of[new] = np.arange(self._rows, self._rows + len(new))
        self._rows += len(new)
        return self._row_of[ranks]

    def full_rate(self, now: float) -> float:
        """Calls per second the job makes (every call, sampled or not): the sum of its
        collectors' rates, or without their counters the op rows ingested times K."""
        n = self._rows
        if n:
            c = self._counts[:n]
            span = c[:, 2] - c[:, 0]
            ok = span >= NS
            if ok.any():
                rates = (c[ok, 3] - c[ok, 1]) * NS / span[ok]
                # ranks not yet measured count as the measured ones' mean
                return float(rates.sum() * n / int(ok.sum()))
        return self.meter.rate("ops", now) * self.sample

    def rates(self, now: float) -> dict[str, float]:
        """Records/s per kind the job sends at its schedule, and ``full``: its calls/s."""
        out = {k: self.meter.rate(k, now) for k in KINDS}
        for kind in ("progress", "linkstat"):
            demand = self._window_rate(kind)
            if demand is not None:
                out[kind] = demand
        out["full"] = self.full_rate(now)
        return out

    def sending(self, now: float) -> float:
        """Records/s the job sends at its schedule, every kind together."""
        r = self.rates(now)
        return sum(r[k] for k in KINDS)

    # -- decisions ------------------------------------------------------------------------
    def decide(self, now: float, now_ns: int) -> Decision | None:
        """A new schedule when the job's factor or window must change, else None."""
        cfg = self.cfg
        self._now_ns = now_ns
        if cfg.records_per_s <= 0 and not cfg.fixed_sample:
            return None
        if not self.version:
            first = self._start(now)
            if first is not None:
                return first
        # within ``hold_s`` of a change only a cut: sending less costs no burst, and a job
        # over its budget (or the daemon's share of it) must not wait for its next turn
        held = self._last_change is not None and now - self._last_change < cfg.hold_s
        if self.meter._since is None or now - self.meter._since < min(cfg.measure_s, 3.0):
            # not measured yet: a daemon behind its stream (a large job's registration alone
            # takes it seconds) may have cut the job's share since it started
            return self._start(now) if not self._paces else None
        budget = cfg.records_per_s
        if budget <= 0:         # a fixed factor, set as the default: nothing more to decide
            return None
        # sending more (a lower K, shorter windows) only into what the daemon can follow
        grow = budget * min(self.scale, self.room)
        budget *= self.scale
        r = self.rates(now)
        other = r["progress"] + r["linkstat"] + r["port"] + r["conns"]
        if self._settled():
            window_ns, why_w = self._window(budget, other, r["full"], grow)
        else:
            # not measured at this window yet (a daemon behind its stream applies them late,
            # and what arrived meanwhile was sent at the window before): only longer, on what
            # the job's size makes likely, as its start did
            window_ns = self._window_for_size(budget)
            why_w = f"{self.world} ranks: windows to {window_ns / NS:g} s"
        # the other kinds at the new window
        other_at = other * self.window_ns / window_ns
        for_ops = max(budget - other_at, cfg.ops_floor * budget)
        sample, why_k = self._factor(r["full"], for_ops,
                                     max(grow - other_at, cfg.ops_floor * grow))
        if held:                        # what sends less only
            if sample < self.sample:
                sample, why_k = self.sample, ""
            if window_ns < self.window_ns:
                window_ns, why_w = self.window_ns, ""
        if sample == self.sample and window_ns == self.window_ns:
            return None if held else self._cover_new(now) or self._prune()
        return self._announce(sample, window_ns, now, now_ns, why_k or why_w)

    def _start(self, now: float) -> Decision | None:
        """The factor and window a job starts with, from its size alone (before any
        measure), within the share of its budget the daemon follows now; again, only ever
        higher, while none of its communicators has been seen and that share falls."""
        cfg = self.cfg
        budget = cfg.records_per_s * self.scale
        k0 = 1
        if cfg.fixed_sample:
            k0 = cfg.fixed_sample
        elif cfg.calls_per_rank > 0 and self.world:
            expected = self.world * cfg.calls_per_rank
            for_ops = cfg.ops_floor * budget
            k0 = 1 if expected <= for_ops else \
                min(1 << math.ceil(math.log2(expected / for_ops)), cfg.max_sample)
        window_ns = self._window_for_size(budget)
        k0 = max(k0, self.default)
        if k0 == self.default and window_ns == self.window_ns:
            return None
        why = [f"K={k0}"] if k0 > 1 else []
        window_from = 0
        if window_ns != self.window_ns:
            why.append(f"windows of {window_ns / NS:g} s")
            # on a boundary of both windows, ahead of the sidecars already counting
            window_from = -(-(self._now_ns + int(cfg.margin_s * NS)) // window_ns) * window_ns
        self.default = self.sample = k0
        self.window_ns = window_ns
        self._bump()
        self._last_change = now
        return Decision(self.version, k0, self._window_field(), window_from, {}, {},
                        f"{self.world} ranks at {cfg.calls_per_rank:g} calls/s each: "
                        f"{' and '.join(why)} from the start", default=k0)

    def _window_for_size(self, budget: float) -> int:
        """The current window, or a longer one if the progress keys and sockets the job's
        size makes likely (``windowed_per_rank`` per rank) would take more than their share
        of ``budget``."""
        cfg = self.cfg
        window_ns = self.window_ns
        windowed = self.world * cfg.windowed_per_rank
        if budget > 0 and windowed:
            share = (1 - cfg.ops_floor) * budget
            while 2 * window_ns <= cfg.max_window_s * NS and windowed * NS / window_ns > share:
                window_ns *= 2
        return window_ns

    def _window(self, budget: float, other: float, full: float, grow: float
                ) -> tuple[int, str]:
        cfg = self.cfg
        w = self.window_ns
        longest = int(cfg.max_window_s * NS)
        share = (1 - cfg.ops_floor) * budget
        ops_at_cap = full / cfg.max_sample

        def over(at: int) -> bool:
            o = other * w / at
            return o > share or (self.sample >= cfg.max_sample and o + ops_at_cap > budget)

        if w < longest and over(w):
            # at once to the window that holds them, as K goes at once to the factor it needs
            # (a step a decision kept a job over its budget for a minute)
            at = min(2 * w, longest)
            while at < longest and over(at):
                at = min(2 * at, longest)
            return at, f"progress and linkstat at {other:,.0f}/s: windows to {at / NS:g} s"
        shortest = int(cfg.window_s * NS)
        if w > shortest and 2 * other < 0.25 * grow and not (
                self.sample >= cfg.max_sample and 2 * other + ops_at_cap > grow):
            return max(w // 2, shortest), f"windows back to {max(w // 2, shortest) / NS:g} s"
        return w, ""

    def _factor(self, full: float, for_ops: float, grow_ops: float) -> tuple[int, str]:
        """K for ``full`` calls/s: up at once to what ``for_ops`` holds; down one step when
        the rate at half K fits ``grow_ops`` (what the daemon can follow) with margin."""
        cfg = self.cfg
        if cfg.fixed_sample:
            return cfg.fixed_sample, f"a fixed factor K={cfg.fixed_sample}"
        need = 1 if full <= for_ops else 1 << max(0, math.ceil(math.log2(full / for_ops)))
        need = min(need, cfg.max_sample)
        if need > self.sample:
            return need, f"{full:,.0f} calls/s over {for_ops:,.0f}/s left for them: K={need}"
        if need < self.sample and full / (self.sample // 2) <= cfg.lower_at * grow_ops:
            k = self.sample // 2
            return k, f"{full:,.0f} calls/s fit at K={k}"
        return self.sample, ""

    def _announce(self, sample: int, window_ns: int, now: float, now_ns: int,
                  why: str) -> Decision:
        cfg = self.cfg
        new_steps: dict[str, tuple[int, int]] = {}
        if sample != self.sample:
            for pg in self._paces:
                new_steps[pg] = self._step(pg, sample, now)
        window_from = 0
        if window_ns != self.window_ns:
            unit = max(window_ns, self.window_ns)
            window_from = -(-(now_ns + int(cfg.margin_s * NS)) // unit) * unit
        self.sample, self.window_ns = sample, window_ns
        self._bump()
        self._last_change = now
        return Decision(self.version, sample, self._window_field(), window_from,
                        {pg: list(v) for pg, v in self.steps.items()}, new_steps, why,
                        self.default)

    def _step(self, pg: str, sample: int, now: float) -> tuple[int, int]:
        """A step to ``sample`` for ``pg``, ``margin_s`` of its calls ahead of its fastest
        member, replacing any step not yet in force."""
        pace = self._paces[pg]
        ahead = math.ceil(pace.rate * (self.cfg.margin_s + now - pace.t_top))
        step = (pace.top + 1 + max(ahead, 1), sample)
        kept = [s for s in self.steps.get(pg, []) if s[0] < step[0]]
        self.steps[pg] = [*kept[-1:], step]
        return step

    def _bump(self) -> None:
        """A new version: above every earlier one, also those of a daemon that ran before
        (sidecars keep the highest version they got), so milliseconds of the clock."""
        self.version = max(self.version + 1, self._now_ns // 1_000_000)

    def _window_field(self) -> int:
        """The window as announced: 0 while it is the sidecars' default."""
        return 0 if self.window_ns == int(self.cfg.window_s * NS) else self.window_ns

    def _cover_new(self, now: float) -> Decision | None:
        """Communicators first seen since K left the default get a step too."""
        if self.sample == self.default:
            return None
        fresh = [pg for pg in self._paces if pg not in self.steps]
        if not fresh:
            return None
        new_steps = {pg: self._step(pg, self.sample, now) for pg in fresh}
        self._bump()
        return Decision(self.version, self.sample, self._window_field(), 0,
                        {pg: list(v) for pg, v in self.steps.items()}, new_steps,
                        f"{len(fresh)} new communicators at K={self.sample}", self.default)

    def _prune(self) -> Decision | None:
        """Once every step is in force, drop the steps before it: a sidecar leaves reduced
        mode only when no step of the schedule keeps fewer than every call."""
        stale = False
        for pg, steps in self.steps.items():
            pace = self._paces.get(pg)
            if len(steps) > 1 and pace is not None and pace.top >= steps[-1][0]:
                self.steps[pg] = steps[-1:]
                stale = True
        if not stale:
            return None
        self._bump()
        return Decision(self.version, self.sample, self._window_field(), 0,
                        {pg: list(v) for pg, v in self.steps.items()}, {}, "steps in force",
                        self.default)

    def restore(self, version: int, sample: int, window_ns: int,
                steps: dict[str, list[tuple[int, int]]], default: int = 1) -> None:
        """Take back a schedule stored before a daemon restart."""
        self.version, self.sample, self.default = version, sample, max(1, default)
        self.window_ns = window_ns or self.window_ns
        self.steps = {pg: list(v) for pg, v in steps.items()}
