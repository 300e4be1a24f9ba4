"""RAS status reports -> c4's ``progress`` records and failed op rows.

RAS counts the collectives each rank *launched* (per type). Beside the completions the
Inspector wrote (:class:`~diagnosis.nccl.convert.Frontiers`), that says which calls a rank is
inside: those launched past the last one it completed (``entered`` > ``completed``). Without
completions (no Inspector record for that rank and communicator), c4 takes every call but the
last as completed for the ranks furthest ahead, and every call as completed for the ranks
behind them: members of one collective finish it together, so a call some member has left is
one the laggards finished too; what they have not done is launch the next.

A report is dated when it was taken (``RasSnapshot.t_ns``), so a call is known entered from the
first report that shows it: a rank that never launches the call its peers wait in is what
``noncomm_hang`` looks for. A rank RAS cannot reach (``missing_ranks``, unresponsive in two
reports running or considered dead) or that reports an asynchronous error gets a failed row
(status ``error``) in the call after the last one it completed: the error its peers will meet.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from c4.proto.codec import OP_COLUMNS, STATUS_CODES, Columns
from diagnosis.engine.records import ProgressRecords
from diagnosis.nccl.convert import Frontiers, History
from diagnosis.nccl.ids import op_name
from diagnosis.nccl.job import Resolved
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.ras import RasSnapshot
from diagnosis.nccl.seqmap import launched_index

log = logging.getLogger(__name__)

__all__ = ["RasFeed", "RasRows"]


@dataclass
class RasRows:
    """What one report gives the engine: progress, failed rows (with their error text), and
    the sends and receives ranks are taken to be inside (open rows)."""

    t_ns: int
    progress: ProgressRecords | None = None
    errors: Columns | None = None
    open_p2p: Columns | None = None


@dataclass
class _Missing:
    first_ns: int
    times: int = 1
    reported: bool = False


@dataclass
class RasFeed:
    """Turns reports into rows, one report at a time, in time order.

    RAS counts collectives it launched, and a GPU rank's CPU launches ahead of its stream.
    With ``history`` (the calls each rank completed), a rank silent ``silence_ns`` is placed
    in the one call its stream is in (:meth:`_stream_positions`): its launches on other
    communicators are queued, not entered, and a send or receive it got past on the CPU is an
    open row (what c4's hook would have shipped: a call is open once its stream reached it),
    so that a hang is followed through the pipeline to the rank that waits on no one."""

    resolved: Resolved
    frontiers: Frontiers
    problems: Problems = field(default_factory=Problems)
    history: History | None = None
    silence_ns: int = 5_000_000_000
    #: a rank whose CPU launched past the send or receive its stream is in, silent this long,
    #: is in it (sooner than ``silence_ns``: a peer waiting for it must not meet its hang bound,
    #: 1 s at the least, with the rank seemingly absent)
    ahead_silence_ns: int = 1_000_000_000
    _open_p2p: set[tuple] = field(default_factory=set)
    _missing: dict[tuple[int, str], _Missing] = field(default_factory=dict)
    _failed: set[tuple[int, str]] = field(default_factory=set)

    def rows(self, snap: RasSnapshot) -> RasRows | None:
        if snap.t_ns is None:
            self.problems.add(snap.source, snap.line, "ras_time", "a report without a time: "
                              "it cannot be placed among the other records (skipped)")
            return None
        t = int(snap.t_ns)
        r = self.resolved
        prog: dict[str, list] = {k: [] for k in ("rank", "pg", "entered", "completed")}
        err: list[tuple[int, str, int, str, str]] = []
        # per rank, its progress rows past whose completions (the Inspector's) it launched
        ahead: dict[int, list[int]] = {}
        ranks: set[int] = set()
        for c in snap.comms:
            pg = r.pg_of.get(c.hash)
            if pg is None or pg not in r.groups:
                continue
            entries = []
            pending: set[str] = set()
            for rk in c.ranks:
                g = r.rank(rk.host, rk.pid)
                if g is None:
                    continue
                front = self.frontiers.at(g, pg, t)
                counts = {op_name(k): v for k, v in rk.counts.items()}
                if front is None:
                    entered, completed = launched_index(counts, None, -1), None
                else:
                    gappy = self.frontiers.gappy.get((g, pg), set())
                    entered = max(launched_index(counts, front[1], front[0], gappy),
                                  front[0])
                    completed = front[0]
                    pending |= {k for k, v in counts.items() if v > front[1].get(k, -1) + 1}
                entries.append((g, entered, completed))
                if rk.failed and (g, pg) not in self._failed:
                    self._failed.add((g, pg))
                    err.append((g, pg, entered if entered >= 0 else 0, "unknown",
                                f"RAS: rank {rk.rank} of {pg} reports init state "
                                f"{rk.init_state}, asynchronous error {rk.async_error}"))
            top = max((e for _, e, _ in entries), default=-1)
            for g, entered, completed in entries:
                if entered < 0:
                    continue
                ranks.add(g)
                if completed is None:
                    completed = entered - 1 if entered == top else entered
                elif entered > completed:
                    ahead.setdefault(g, []).append(len(prog["rank"]))
                prog["rank"].append(g)
                prog["pg"].append(pg)
                prog["entered"].append(entered)
                prog["completed"].append(completed if completed >= 0 else None)
            op = next(iter(pending)) if len(pending) == 1 else "unknown"
            done = max((d for _, _, d in entries if d is not None), default=-1)
            if top >= 0:     # a communicator of point-to-point calls only has no call to fail
                err += [(*e[:3], op, e[3])
                        for e in self._missing_rows(c.missing, pg, t, top, done)]
        out = RasRows(t)
        out.open_p2p = self._stream_positions(ranks, ahead, prog, t)
        if prog["rank"]:
            n = len(prog["rank"])
            out.progress = ProgressRecords.build(prog["rank"], prog["pg"], [t] * n,
                                                 prog["entered"], prog["completed"])
        if err:
            out.errors = failed_rows(err, t)
        return out

    def _missing_rows(self, missing: Iterable, pg: str, t: int, top: int, done: int
                      ) -> list[tuple[int, str, int, str]]:
        """Failed rows of the ranks RAS has lost, in the call after the last one they
        completed: their own last Inspector record, or the last call a present member
        completed (``done``) when that is later. A process that dies loses the records it had
        not dumped yet, and a collective its peers completed, it took part in."""
        out = []
        for m in missing:
            g = self.resolved.rank(m.host, m.pid)
            if g is None:
                continue
            st = self._missing.get((g, pg))
            if st is None:
                st = self._missing[(g, pg)] = _Missing(t)
            elif t > st.first_ns:
                st.times += 1
            if st.reported or not (m.considered_dead or (m.unresponsive and st.times >= 2)):
                continue
            st.reported = True
            front = self.frontiers.at(g, pg, t)
            seq = max(front[0], done) + 1 if front is not None else max(top, 0)
            state = "considered dead" if m.considered_dead else "unresponsive"
            out.append((g, pg, seq, f"RAS: rank {m.rank} of {pg} (process {m.pid} on "
                        f"{m.host}) is {state}: missing from every report since then"))
        return out

    def _stream_positions(self, ranks: set[int], ahead: dict[int, list[int]],
                          prog: dict[str, list], t: int) -> Columns | None:
        """Where each rank's stream is, of all the calls its CPU launched.

        RAS counts launches: a rank whose stream waits in one call has launched the calls
        after it too, up to whatever makes its CPU wait for the GPU, on every communicator.
        Its stream is in the call its own pattern says follows its last completed one
        (``history``); its launches on the other communicators are queued behind it, not
        entered (``prog`` is changed so, for every rank). A send or receive (which RAS does
        not count) that the CPU of a rank silent ``ahead_silence_ns`` got past, launching
        collectives it has not completed, is an open row.

        A rank that launched nothing past its completions shows no call. Where other silent
        ranks of the report did run ahead, this job's CPUs launch past a waiting call, so
        this one's CPU stopped outside NCCL (a hung process): it is in no call. Where none
        did (a job that waits for its GPU after every call, or a source that counts calls
        when the GPU reaches them), nothing tells a rank blocked in a send or receive from
        one stopped before it, and the rank is taken to be inside the send or receive its
        pattern says comes next, as c4's hook would show it. Returns the open send/recv
        rows."""
        if self.history is None:
            return None
        # (a running rank too: a count only grows on the board, so a queued call written as
        # entered while the rank still ran would stay entered once it stopped)
        placed: list[tuple[int, tuple[str, str, int, int], int]] = []     # rank, call, quiet
        for g in sorted(ranks):
            last = self.history.last_end(g, t)
            if last is None:
                continue
            quiet = t - last
            if quiet < self.silence_ns and not ahead.get(g):
                continue
            nxt = self.history.next_call(g, t)
            if nxt is not None:
                placed.append((g, nxt, quiet))
        runs_ahead = any(quiet >= self.ahead_silence_ns
                         and self._launched_past(ahead.get(g, []), prog, nxt)
                         for g, nxt, quiet in placed)
        rows = []
        for g, (pg, op, peer, seq), quiet in placed:
            p2p = peer >= 0 and op in ("send", "recv")
            mine = ahead.get(g, [])
            if not mine:
                if p2p and not runs_ahead and quiet >= self.silence_ns:
                    rows.append((g, pg, op, peer, seq))
                continue
            here = [i for i in mine if prog["pg"][i] == pg]
            if not p2p and not here:
                continue        # its pattern and its launches disagree: leave them as RAS says
            for i in mine:
                if i not in here:
                    done = prog["completed"][i]
                    prog["entered"][i] = done if done is not None else -1
            if p2p and quiet >= self.ahead_silence_ns:
                rows.append((g, pg, op, peer, seq))
        rows = [x for x in rows if x not in self._open_p2p]
        self._open_p2p.update(rows)
        if not rows:
            return None
        return open_rows(rows, t)

    @staticmethod
    def _launched_past(mine: list[int], prog: dict[str, list],
                       nxt: tuple[str, str, int, int]) -> bool:
        """Whether a rank launched calls past the one its stream is in (``nxt``): any
        collective launched and not completed when that call is a send or receive, more than
        that one call when it is a collective."""
        n = sum(prog["entered"][i] - (prog["completed"][i] if prog["completed"][i] is not None
                                      else -1) for i in mine)
        return n > (0 if nxt[2] >= 0 else 1)


def open_rows(rows: list[tuple[int, str, str, int, int]], t_ns: int) -> Columns:
    """Open op rows for (rank, pg, op, peer, seq), entered at ``t_ns``."""
    n = len(rows)
    table: dict[str, int] = {}
    pg = [table.setdefault(x[1], len(table)) for x in rows]
    op = [table.setdefault(x[2], len(table)) for x in rows]
    blank = table.setdefault("", len(table))
    cols = {"rank": [x[0] for x in rows], "pg": pg, "seq": [x[4] for x in rows], "op": op,
            "nbytes": [0] * n, "dtype": [blank] * n, "t_enter_ns": [t_ns] * n,
            "t_start_ns": [-1] * n, "t_end_ns": [-1] * n, "status": [0] * n,
            "peer": [x[3] for x in rows]}
    return Columns({k: np.asarray(cols[k]).astype(dt) for k, dt in OP_COLUMNS.items()},
                   list(table))


def failed_rows(rows: list[tuple[int, str, int, str, str]], t_ns: int) -> Columns:
    """Op rows with status ``error`` for (rank, pg, seq, op, error text), at ``t_ns``."""
    n = len(rows)
    table: dict[str, int] = {}
    pg = [table.setdefault(x[1], len(table)) for x in rows]
    op = [table.setdefault(x[3], len(table)) for x in rows]
    blank = table.setdefault("", len(table))
    cols = {"rank": [x[0] for x in rows], "pg": pg, "seq": [x[2] for x in rows],
            "op": op, "nbytes": [0] * n, "dtype": [blank] * n, "t_enter_ns": [t_ns] * n,
            "t_start_ns": [-1] * n, "t_end_ns": [t_ns] * n,
            "status": [STATUS_CODES["error"]] * n, "peer": [-1] * n}
    return Columns({k: np.asarray(cols[k]).astype(dt) for k, dt in OP_COLUMNS.items()},
                   list(table), {i: x[4] for i, x in enumerate(rows)})
