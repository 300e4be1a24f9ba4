"""The Engine contract: configuration checks, hand-built traces with known truth, report updates,
open rows completed later, bounded memory."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from c4.proto.codec import OP_COLUMNS, Columns
from diagnosis.engine import Engine, EngineConfig
from diagnosis.errors import ConfigError
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace
from diagnosis.trace.synth import SynthJob
from tests.support.engine_builders import op_columns, op_row

MS = 1_000_000
STRINGS = ["g", "all_reduce", ""]  # pg 0, op 1, dtype 2 of op_row
_cols = partial(op_columns, STRINGS)


def test_config_rejects_bad_values_by_name():
    with pytest.raises(ConfigError, match="hang_factor"):
        EngineConfig(hang_factor=0.5)
    with pytest.raises(ConfigError, match="window"):
        EngineConfig(window=0)
    with pytest.raises(ConfigError, match="slow_min_frac"):
        EngineConfig(slow_min_frac=1.5)


def _chain_trace(path, iterations=30, hang_at=20):
    """Ranks 0-3; per iteration c=[2,3], then b=[1,2], then a=[0,1]. Rank 3 stops at
    ``hang_at``: 2 waits in c, so 1 waits in b for 2, so 0 waits in a for 1."""
    t = 0
    with TraceWriter(path) as w:
        for pg, ranks in (("a", [0, 1]), ("b", [1, 2]), ("c", [2, 3])):
            w.group(pg, ranks)
        for it in range(iterations):
            t += 50 * MS
            for pg, ranks in (("c", [2, 3]), ("b", [1, 2]), ("a", [0, 1])):
                if it == hang_at:
                    for r in ranks:
                        if r != {"c": 3, "b": 2, "a": 1}[pg]:
                            w.op(r, pg, it, "all_reduce", 4096, t + r)
                    continue
                for r in ranks:
                    w.op(r, pg, it, "all_reduce", 4096, t + r * 10_000, t + 2 * MS)
                t += 3 * MS
            if it == hang_at:
                w.end(t + 60_000 * MS)
                return


def test_noncomm_hang_follows_the_chain_to_the_rank_that_is_not_waiting(tmp_path):
    path = tmp_path / "chain.jsonl"
    _chain_trace(path)
    reports, _ = feed_trace(Engine(), path)
    assert [r.kind for r in reports] == ["noncomm_hang"]
    r = reports[0]
    s = r.suspects[0]
    # no placement known: a rank suspect
    assert (s.type, s.id, s.rank) == ("rank", "3", 3)
    assert (r.pg, r.seq) == ("c", 20)
    assert r.evidence["last_completed"]["3"] == "all_reduce #19 on c"


def test_open_rows_completed_later_are_no_hang_and_updates_are_emitted_once():
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    eng.add_group("g", [0, 1, 2])
    t = 0
    for seq in range(20):
        t += 10 * MS
        eng.add_ops(_cols([op_row(r, seq, t + r, t + MS) for r in range(3)]))
    # seq 20: ranks 0 and 1 report the call open; rank 2 has not arrived
    t += 10 * MS
    eng.add_ops(_cols([op_row(r, 20, t + r, -1) for r in range(2)]))
    assert eng.advance(t + 50 * MS) == []
    found = eng.advance(t + 5_000 * MS)
    assert [r.kind for r in found] == ["noncomm_hang"]
    assert eng.advance(t + 5_000 * MS) == []          # nothing new: nothing re-emitted
    fid = found[0].id
    # rank 2 turns up after all and the call completes: the alarm is withdrawn
    eng.add_ops(_cols([op_row(r, 20, t + r if r < 2 else t + 5_100 * MS, t + 5_101 * MS)
                       for r in range(3)]))
    upd = eng.advance(t + 5_200 * MS)
    assert [(r.id, r.state) for r in upd] == [(fid, "resolved")]
    assert eng.finish() == []
    assert [r.state for r in eng.reports()] == ["resolved"]


def test_memory_is_bounded_by_the_window(tmp_path):
    sizes = []
    for iterations in (30, 120):
        job = SynthJob(hosts=4, gpus_per_host=2, iterations=iterations, conns=True)
        path = tmp_path / f"t{iterations}.jsonl"
        job.write(path)
        eng = Engine(job.topology())
        feed_trace(eng, path)
        sizes.append((eng.arena.cells, len(eng.arena.c_enter), len(eng.conns),
                      eng.slow.classes[4].x.shape if 4 in eng.slow.classes else None,
                      len(eng.conns.open_key)))
    assert sizes[0] == sizes[1]


def test_rank_that_stops_reporting_while_its_peers_go_on_is_an_error():
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    eng.add_rank(0, "h0")
    eng.add_rank(1, "h0")
    eng.add_rank(2, "h1")
    eng.add_group("g", [0, 1, 2])
    t = 0
    for seq in range(30):
        t += 10 * MS
        ranks = range(3) if seq < 20 else range(2)    # rank 2's telemetry stops at seq 20
        eng.add_ops(_cols([op_row(r, seq, t + r, t + MS) for r in ranks]))
        eng.advance(t)
    found = eng.finish(t + 10_000 * MS)
    assert [r.kind for r in found] == ["error"]
    s = found[0].suspects[0]
    assert (s.type, s.id, s.rank) == ("rank", "2", 2)
    assert found[0].evidence["stopped_reporting"] is True
    assert "stopped reporting" in found[0].summary


def test_ranks_whose_records_arrive_late_but_steadily_have_not_stopped_reporting():
    # host h1's sidecar lags the others by 4 s (its outbox draining after a push-back): the
    # calls finish on h0's records long before h1's arrive, yet h1's keep coming. No error,
    # before or after they catch up.
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    for r, h in ((0, "h0"), (1, "h0"), (2, "h1"), (3, "h1")):
        eng.add_rank(r, h)
    eng.add_group("g", [0, 1, 2, 3])
    lag, step, out = 40, 100 * MS, []
    for n in range(200 + lag):
        rows = [op_row(r, n, n * step + r, n * step + MS) for r in (0, 1) if n < 200]
        late = n - lag
        if late >= 0:
            rows += [op_row(r, late, late * step + r, late * step + MS) for r in (2, 3)]
        eng.add_ops(_cols(rows))
        out += eng.advance(n * step + MS)
    out += eng.finish()
    assert not [r for r in out if r.kind == "error"]


def test_ranks_whose_records_wait_in_the_daemons_queue_have_not_stopped_reporting():
    # the daemon falls 20 s behind with h1's records (its detectors busy): h0's were added,
    # h1's wait unapplied, then arrive at once. Their silence meanwhile is the daemon's.
    def run(tell: bool) -> list:
        eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
        for r, h in ((0, "h0"), (1, "h0"), (2, "h1"), (3, "h1")):
            eng.add_rank(r, h)
        eng.add_group("g", [0, 1, 2, 3])
        step, held, out = 100 * MS, [], []
        for n in range(400):
            eng.add_ops(_cols([op_row(r, n, n * step + r, n * step + MS) for r in (0, 1)]))
            late = [op_row(r, n, n * step + r, n * step + MS) for r in (2, 3)]
            if 100 <= n < 300:
                held += late
            else:
                eng.add_ops(_cols(held + late))
                held = []
            waited = (n - 100) * step if 100 <= n < 300 else 0
            out += eng.advance(n * step + MS, unapplied_ns=waited if tell else 0)
        return out

    assert not [r for r in run(tell=True) if r.kind == "error"]
    # told nothing, the engine takes them for ranks that stopped reporting
    assert [r for r in run(tell=False) if r.kind == "error"]


def test_a_rank_silent_while_its_host_mate_is_heard_is_reported_without_waiting():
    # rank 3's collector stops at seq 20; rank 2, on the same host and sidecar, goes on: its
    # records prove the host's telemetry arrives, so rank 3's silence is filed once the
    # teardown grace has passed, without first waiting for signs of life that may be late
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    for r, h in ((0, "h0"), (1, "h0"), (2, "h1"), (3, "h1")):
        eng.add_rank(r, h)
    eng.add_group("g", [0, 1, 2, 3])
    step, filed_at = 100 * MS, None
    for n in range(60):
        eng.add_ops(_cols([op_row(r, n, n * step + r, n * step + MS)
                           for r in range(4) if n < 20 or r != 3]))
        if any(r.kind == "error" for r in eng.advance(n * step + MS)) and filed_at is None:
            filed_at = n
    assert filed_at is not None
    assert (filed_at - 20) * step < EngineConfig().evidence_delay_ns
    errors = [r for r in eng.reports() if r.kind == "error"]
    assert [s.rank for s in errors[0].suspects] == [3]


def test_batch_without_string_table_is_ignored():
    eng = Engine()
    eng.add_group("g", [0, 1])
    cols = _cols([op_row(0, 0, 1, 2)])
    cols.strings = []
    eng.add_ops(cols)
    assert eng.dropped == 1 and eng.finish() == []


def test_rank_that_reports_again_is_no_longer_an_error():
    # rank 2's telemetry stops at seq 20 while its peers go on (its collector frozen); from
    # seq 80 it speaks again: the "stopped reporting" error is withdrawn
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    for r, h in ((0, "h0"), (1, "h0"), (2, "h1")):
        eng.add_rank(r, h)
    eng.add_group("g", [0, 1, 2])
    t, out = 0, []
    for seq in range(100):
        t += 100 * MS
        ranks = range(2) if 20 <= seq < 80 else range(3)
        eng.add_ops(_cols([op_row(r, seq, t + r, t + MS) for r in ranks]))
        out += eng.advance(t)
    errors = [r for r in out if r.kind == "error"]
    assert errors and errors[0].evidence["stopped_reporting"] is True
    assert errors[-1].state == "resolved"
    assert errors[-1].evidence["resolved"] == "the rank(s) report again"
    assert not [r for r in eng.reports() if r.state == "open"]


def test_rows_that_end_before_they_were_entered_are_counted_and_do_not_make_a_hang(
        tmp_path, caplog):
    """A collector whose clock stepped back writes calls that end before they were entered:
    they are read as entered when they ended (the rank did arrive and leave), counted and
    named in one warning, never dropped into a hang of the rank that wrote them."""
    path = tmp_path / "inverted.jsonl"
    t = 0
    inverted = 0
    with TraceWriter(path) as w:
        w.group("dp", [0, 1, 2, 3])
        for it in range(60):
            t += 40 * MS
            for r in range(4):
                enter, end = t + r * 50_000, t + 3 * MS
                if r == 2 and it % 3 == 0:
                    enter, end = end + 2 * MS, end
                    inverted += 1
                w.op(r, "dp", it, "all_reduce", 1 << 20, enter, end)
            t += 3 * MS
        w.end(t + 100 * MS)
    engine = Engine()
    with caplog.at_level("WARNING", logger="diagnosis.engine.engine"):
        reports, _ = feed_trace(engine, path)
    assert reports == []
    assert engine.inverted == inverted == 20
    warned = [r.getMessage() for r in caplog.records if "end before they were" in r.getMessage()]
    assert len(warned) == 1 and "rank 2" in warned[0]


def test_a_batch_of_many_unknown_group_names_is_dropped_with_one_line(caplog):
    """A forged batch naming many groups no group record announced: dropped and counted, with
    one warning (it was one per group)."""
    n = 200_000
    strings = [f"pg{i}" for i in range(n)] + ["all_reduce", "unused"] * 1000
    cols = {k: np.zeros(n, dtype=dt) for k, dt in OP_COLUMNS.items()}
    cols["pg"] = np.arange(n, dtype=np.uint32)
    cols["op"] = np.full(n, n, dtype=np.uint32)
    cols["t_enter_ns"] = np.arange(n, dtype=np.int64) + 10**18
    cols["t_end_ns"] = cols["t_enter_ns"] + 5
    cols["peer"] = cols["peer"] - 1
    eng = Engine()
    with caplog.at_level("WARNING"):
        eng.add_ops(Columns(cols, strings))
    assert eng.dropped == n
    assert len([r for r in caplog.records if "group record" in r.message]) == 1
    # names no row uses are not interned at all
    assert "unused" not in eng.pg_names and "unused" not in eng.op_names


def _seconds_of_calls(seconds: int, slow_from_s: int) -> list[list]:
    """Per second, the calls of 8 ranks in one communicator, ten a second with noise; rank 3
    computes 30 ms longer before each call from ``slow_from_s`` on."""
    rng = np.random.default_rng(5)
    out = []
    for s in range(seconds):
        rows = []
        for i in range(10):
            seq = s * 10 + i
            enter = (seq * 100 + 40) * MS + rng.integers(0, 2 * MS, 8)
            if s >= slow_from_s:
                enter[3] += 30 * MS
            end = int(enter.max()) + 5 * MS
            rows += [op_row(r, seq, int(enter[r]), end) for r in range(8)]
        out.append(rows)
    return out


def test_an_engine_analysed_every_second_reports_at_the_first_second_that_shows_the_fault():
    """``EngineConfig.analysed_every``, as the daemon's live view sets it: a slow rank is
    reported at the first advance whose data shows it (a whole pass over those data finds
    it), not at the default cadence of the slow detectors, every 2 s of data."""
    chunks = _seconds_of_calls(30, slow_from_s=13)

    def first_report(config: EngineConfig | None, fresh_each_second: bool) -> int:
        eng = Engine(config=config)
        for s, rows in enumerate(chunks):
            if fresh_each_second:
                eng = Engine(config=config)
                eng.add_group("g", list(range(8)))
                eng.add_ops(_cols([r for c in chunks[:s + 1] for r in c]))
                found = eng.finish(int(max(r[8] for r in rows)))
            else:
                if s == 0:
                    eng.add_group("g", list(range(8)))
                eng.add_ops(_cols(rows))
                found = eng.advance(int(max(r[8] for r in rows)))
            if any(r.kind == "noncomm_slow" for r in found):
                return s
        raise AssertionError("the slow rank was never reported")

    shows = first_report(None, fresh_each_second=True)
    assert first_report(EngineConfig.analysed_every(1.0), fresh_each_second=False) == shows
    # the default cadence runs the slow detectors at even seconds of these data: a second later
    assert shows % 2 == 1
    assert first_report(None, fresh_each_second=False) == shows + 1
