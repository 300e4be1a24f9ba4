"""Ranks that stopped reporting, told from sidecars that lag (diagnosis/daemon/channels.py): the
live view knows which sidecar carries each rank, and a rank counts as silent only when records
its sidecar sent from after the call arrived without it, or the sidecar went quiet for good.

Four ranks on four hosts; sidecar "s1" carries hosts h0 and h1, "s2" hosts h2 and h3 (as one
stream stands for the sidecars of many nodes in the scale bench)."""

from __future__ import annotations

from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.live import LiveView
from diagnosis.store import RankRecord, Write, open_store
from diagnosis.store.api import GroupRecord, OpRows
from tests.support.engine_builders import op_columns, op_row

S = 1_000_000_000
T0 = 1_800_000_000 * S
STEP = S // 10
SIDECAR = {0: "s1", 1: "s1", 2: "s2", 3: "s2"}


class Job:
    def __init__(self) -> None:
        self.live = LiveView(FaultHub(open_store("memory://")), interval_s=0.1)
        self.seq = 0
        self.held: list[Write] = []
        self.live.apply([Write(SIDECAR[r], r, RankRecord("job", 0, r, 4, f"h{r}"))
                         for r in range(4)]
                        + [Write("s1", 9, GroupRecord("job", 0, "g", (0, 1, 2, 3)))])
        self.live.drain()

    def step(self, n: int, ranks: tuple[int, ...], hold: tuple[int, ...] = ()) -> list:
        """Call ``n`` of every rank in ``ranks``; the rows of those in ``hold`` kept back (their
        sidecar's stream stalled); then an analysis pass at the call's time."""
        t = T0 + n * STEP
        for side in ("s1", "s2"):
            rows = [op_row(r, n, t + r, t + S // 100) for r in ranks if SIDECAR[r] == side]
            if not rows:
                continue
            w = Write(side, 100 + 2 * n + (side == "s2"),
                      OpRows("job", 0, op_columns(["g", "all_reduce", "float32"], rows)))
            if any(r in hold for r in ranks if SIDECAR[r] == side):
                self.held.append(w)
            else:
                self.live.apply([w])
        self.live.drain()
        return self._analyze(t + S // 100)

    def release(self, t: int) -> list:
        self.live.apply(self.held)
        self.held = []
        self.live.drain()
        return self._analyze(t)

    def _analyze(self, t: int) -> list:
        self.live.analyze(now_ns=t)
        return [r for r in self.live._jobs[("job", 0)].engine.reports() if r.kind == "error"]


def test_a_sidecar_that_stalls_and_catches_up_is_no_rank_that_stopped_reporting():
    # s2's stream delivers nothing for 20 s (starved among other streams), then everything
    job = Job()
    for n in range(400):
        errors = job.step(n, (0, 1, 2, 3), hold=(2, 3) if 100 <= n < 300 else ())
        assert not errors, [e.summary for e in errors]
        if n == 299:
            assert not job.release(T0 + n * STEP + S // 100)


def test_a_rank_silent_while_its_sidecar_delivers_a_later_call_stopped_reporting():
    # rank 2's collector stops at call 20; rank 3, on another host but the same sidecar, goes on
    job = Job()
    filed = None
    for n in range(100):
        errors = job.step(n, (0, 1, 2, 3) if n < 20 else (0, 1, 3))
        if errors and filed is None:
            filed = n
            assert [s.rank for s in errors[0].suspects] == [2]
    assert filed is not None


def test_ranks_of_a_sidecar_that_went_quiet_for_good_stopped_reporting():
    # s2 delivers nothing from call 20 on while the peers' calls finish: after the sidecar's
    # 30 s of quiet its ranks are filed
    job = Job()
    filed = None
    for n in range(450):
        errors = job.step(n, (0, 1, 2, 3), hold=(2, 3) if n >= 20 else ())
        if errors and filed is None:
            filed = n
            assert sorted(s.rank for s in errors[0].suspects) in ([2], [3], [2, 3])
    assert filed is not None and (filed - 20) * STEP >= 30 * S
