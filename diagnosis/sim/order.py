"""The order in which records leave the job: as collectors ship them, a call's record once it
has completed (``t_end_ns``), a call still in flight when recording stops by its entry time.

The simulation produces one iteration at a time, and some rows of an iteration complete after
rows of the next one begin; a small buffer releases rows only up to the start of the newest
iteration (less the clock skew), sorted by that completion time, so the output is globally
ordered.
"""

from __future__ import annotations

import numpy as np

from diagnosis.sim.model import Batch

ORDERS = ("complete", "enter")


def visible_ns(cols: dict[str, np.ndarray], start: str) -> np.ndarray:
    """When a row becomes known: its end, or its start (``start`` column) if it never ends."""
    return np.where(cols["t_end_ns"] >= 0, cols["t_end_ns"], cols[start])


class Reorder:
    """Feed batches with :meth:`push`; get back (ops, conns) column chunks in completion order;
    :meth:`flush` releases the rest at the end."""

    def __init__(self, skew_ns: int) -> None:
        self.skew_ns = skew_ns
        self.ops: list[dict[str, np.ndarray]] = []
        self.conns: list[dict[str, np.ndarray]] = []

    def horizon(self, iteration_start_ns: int) -> int:
        """The time up to which every record is known once the iteration that starts at
        ``iteration_start_ns`` has been simulated: later ones start after it, on any clock."""
        return iteration_start_ns - 2 * self.skew_ns

    def push(self, b: Batch, iteration_start_ns: int) -> tuple[dict, dict]:
        self.ops.append(b.ops)
        self.conns.append(b.conns)
        return self.release(self.horizon(iteration_start_ns))

    def flush(self) -> tuple[dict, dict]:
        return self.release(np.iinfo(np.int64).max)

    def release(self, t_ns: int) -> tuple[dict, dict]:
        ops, self.ops = _cut(self.ops, "t_enter_ns", t_ns)
        conns, self.conns = _cut(self.conns, "t_start_ns", t_ns)
        return ops, conns


def _cut(parts: list[dict[str, np.ndarray]], start: str, t_ns: int
         ) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    vis = visible_ns(cols, start)
    now = vis <= t_ns
    order = np.argsort(vis[now], kind="stable")
    out = {k: v[now][order] for k, v in cols.items()}
    rest = {k: v[~now] for k, v in cols.items()}
    return out, [rest]
