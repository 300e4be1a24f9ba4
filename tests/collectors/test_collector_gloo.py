"""Real multi-process gloo jobs with the collector, shipping over a real Unix socket to a frame
sink that decodes the frames with the production wire and codec functions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from collector_testkit import REPO, FrameSink, launch_ranks, wait_ranks

pytestmark = [pytest.mark.multiprocess, pytest.mark.network]

HERE = Path(__file__).resolve().parent
WORLD = 3
STATUS = {"ok": 0, "timeout": 1, "error": 2}
P2P = {"send", "recv", "isend", "irecv"}


@pytest.fixture
def sink(tmp_path):
    s = FrameSink(tmp_path / "sidecar.sock")
    yield s
    s.close()


def _is_send(op: str) -> bool:
    return op in ("send", "isend")


@pytest.fixture(scope="module")
def rich_job(tmp_path_factory):
    """Run the rich job once; every test below checks one aspect of what arrived."""
    tmp = tmp_path_factory.mktemp("rich")
    sink = FrameSink(tmp / "sidecar.sock")
    env = {"C4_SIDECAR_SOCKET": str(sink.path), "C4_JOB": "rich", "C4_OPEN_AFTER": "0.3",
           "C4_ATTEMPT": "2", "C4_HOST": "node007"}
    procs = launch_ranks(HERE / "collector_job.py", WORLD, env,
                         [str(tmp / "calls{}.json"), "install"])
    wait_ranks(procs, timeout=180)
    sink.close()
    truth = {r: json.loads((tmp / f"calls{r}.json").read_text()) for r in range(WORLD)}
    return sink, truth


def test_rank_info_comes_first_on_every_connection(rich_job):
    sink, _ = rich_job
    first: dict[int, str] = {}
    ranks = {}
    for cid, msg in sink.frames:
        first.setdefault(cid, msg.WhichOneof("body"))
        if msg.WhichOneof("body") == "rank":
            ranks[msg.rank.rank] = msg.rank
    assert set(first.values()) == {"rank"}
    assert sorted(ranks) == list(range(WORLD))
    for r, info in ranks.items():
        assert (info.job, info.attempt, info.world_size, info.backend) == ("rich", 2, WORLD, "gloo")
        assert info.host == "node007" and info.local_rank == r and info.pid > 0


def test_groups_announced_with_their_ranks(rich_job):
    sink, truth = rich_job
    announced = {(g.group.pg, tuple(g.group.ranks)) for g in sink.of_kind("group")}
    for r in range(WORLD):
        for name, members in truth[r]["groups"].items():
            assert (name, tuple(members)) in announced
    assert all(g.group.job == "rich" and g.group.attempt == 2 for g in sink.of_kind("group"))


def test_every_call_recorded_exactly_once_with_its_fields(rich_job):
    sink, truth = rich_job
    done = [r for r in sink.op_rows() if r["t_end_ns"] != -1]
    keys = Counter((r["rank"], r["pg"], r["op"], r["peer"], r["seq"]) for r in done)
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    for rank in range(WORLD):
        calls = truth[rank]["calls"]
        mine = [r for r in done if r["rank"] == rank]
        assert len(mine) == len(calls)
        # Collectives: per group, in seq order 0, 1, 2 ... exactly the calls the rank made.
        for pg in {c["pg"] for c in calls}:
            want = [(c["op"], c["bytes"], STATUS[c["status"]]) for c in calls
                    if c["pg"] == pg and c["op"] not in P2P]
            got = sorted((r for r in mine if r["pg"] == pg and r["op"] not in P2P),
                         key=lambda r: r["seq"])
            assert [r["seq"] for r in got] == list(range(len(want)))
            assert [(r["op"], r["nbytes"], r["status"]) for r in got] == want
        # Point-to-point: per group and direction, seq counts the messages to/from that peer.
        want_p2p = defaultdict(list)
        for c in calls:
            if c["op"] in P2P:
                want_p2p[(c["pg"], _is_send(c["op"]), c["peer"])].append((c["op"], c["bytes"]))
        got_p2p = defaultdict(list)
        for r in sorted((r for r in mine if r["op"] in P2P), key=lambda r: r["seq"]):
            got_p2p[(r["pg"], _is_send(r["op"]), r["peer"])].append(r)
        assert set(got_p2p) == set(want_p2p)
        for key, want in want_p2p.items():
            got = got_p2p[key]
            assert [r["seq"] for r in got] == list(range(len(want)))
            assert [(r["op"], r["nbytes"]) for r in got] == want
    # Every op of the brief appears, synchronous and async.
    by_mode = {(c["op"], c["async"]) for t in truth.values() for c in t["calls"]}
    for op in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all",
               "all_to_all_single", "barrier"):
        assert {(op, False), (op, True)} <= by_mode
    assert {"send", "recv", "isend", "irecv"} <= {op for op, _ in by_mode}
    assert all(r["job"] == "rich" and r["attempt"] == 2 for r in done)
    assert all(r["t_end_ns"] >= r["t_enter_ns"] > 0 for r in done)


def test_sequence_numbers_match_across_ranks(rich_job):
    sink, truth = rich_job
    done = [r for r in sink.op_rows() if r["t_end_ns"] != -1]
    members = {pg: set(m) for t in truth.values() for pg, m in t["groups"].items()}
    coll = defaultdict(dict)
    for r in done:
        if r["op"] not in P2P:
            coll[(r["pg"], r["seq"])][r["rank"]] = (r["op"], r["nbytes"])
    for (pg, _seq), by_rank in coll.items():
        if pg in members and len(by_rank) > 1:
            assert set(by_rank) == members[pg]
            assert len({op for op, _ in by_rank.values()}) == 1
    sends = {(r["pg"], r["rank"], r["peer"], r["seq"]): r["nbytes"] for r in done
             if _is_send(r["op"])}
    recvs = {(r["pg"], r["peer"], r["rank"], r["seq"]): r["nbytes"] for r in done
             if r["op"] in ("recv", "irecv")}
    assert sends == recvs  # the k-th send a->b is the k-th recv on b from a, same size
    assert any(pg != "0" for pg, *_ in sends)  # the subgroup's message, addressed by group rank


def test_failures_recorded_with_status_and_text(rich_job):
    sink, _ = rich_job
    done = [r for r in sink.op_rows() if r["t_end_ns"] != -1]
    errors = [r for r in done if r["status"] == STATUS["error"]]
    assert sorted(r["rank"] for r in errors) == list(range(WORLD))
    assert all(r["op"] == "broadcast" and "invalid root rank" in r["error"] for r in errors)
    timeouts = [r for r in done if r["status"] == STATUS["timeout"]]
    assert [(r["rank"], r["op"]) for r in timeouts] == [(0, "all_reduce")]
    assert "Timed out" in timeouts[0]["error"]
    assert all(r["error"] == "" for r in done if r["status"] == 0)


def test_long_pending_calls_shipped_open_then_completed(rich_job):
    sink, truth = rich_job
    rows = sink.op_rows()  # in arrival order per connection
    opened = [r for r in rows if r["t_end_ns"] == -1]

    def key(r: dict) -> tuple:
        return (r["rank"], r["pg"], r["op"], r["peer"], r["seq"])

    # The barrier that waited for the late rank 1 (open on ranks 0 and 2), the next barrier that
    # waited for rank 0's timing-out all_reduce (open on 1 and 2), and that all_reduce itself.
    barriers = sorted({r["seq"] for r in opened if r["op"] == "barrier" and r["pg"] == "0"})
    assert len(barriers) >= 2
    late, after_timeout = barriers[-2], barriers[-1]
    (short_pg,) = {c["pg"] for c in truth[0]["calls"] if c["status"] == "timeout"}
    assert {(0, "0", "barrier", -1, late), (2, "0", "barrier", -1, late),
            (1, "0", "barrier", -1, after_timeout), (2, "0", "barrier", -1, after_timeout),
            (0, short_pg, "all_reduce", -1, 0)} <= {key(r) for r in opened}
    assert (1, "0", "barrier", -1, late) not in {key(r) for r in opened}
    assert Counter(key(r) for r in opened).most_common(1)[0][1] == 1  # shipped open once
    for r in opened:
        later = [x for x in rows if key(x) == key(r) and x["t_end_ns"] != -1]
        assert len(later) == 1 and later[0]["t_enter_ns"] == r["t_enter_ns"]
        assert rows.index(later[0]) > rows.index(r)


def test_stats_frames_count_what_was_shipped(rich_job):
    sink, _ = rich_job
    done = Counter(r["rank"] for r in sink.op_rows() if r["t_end_ns"] != -1)
    last = {}
    for msg in sink.of_kind("stats"):
        (c,) = msg.stats.collectors
        last[c.rank] = c
    for rank in range(WORLD):
        c = last[rank]
        assert (c.job, c.recorded, c.shipped, c.dropped) == ("rich", done[rank], done[rank], 0)


def _result(output: str) -> dict:
    """The JSON line that collector_small_job.py prints last (log lines may follow it)."""
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


def test_job_completes_without_sidecar_and_counts_drops(tmp_path):
    env = {"C4_SIDECAR_SOCKET": str(tmp_path / "nobody-listens.sock"), "C4_BUFFER_ROWS": "16"}
    procs = launch_ranks(HERE / "collector_small_job.py", 2, env, ["60", "install"])
    outs = wait_ranks(procs, timeout=120)
    for out in outs:
        result = _result(out)
        counters = result["counters"]
        # all_reduces, isend + irecv, barrier, DDP's bucket all_reduce in each of two steps
        assert counters["recorded"] == 60 + 2 + 1 + 2
        assert counters["shipped"] == 0
        assert counters["dropped"] == counters["recorded"] - 16
        assert not counters["connected"]


def test_c4_run_torchrun_installs_without_a_line_in_the_script(sink):
    """`c4 run -- torchrun ...`: the workers record; the launcher (which imports torch too)
    never connects."""
    cmd = [sys.executable, "-c", "from c4.cli import main; main()", "run", "--job", "auto",
           "--sidecar-socket", str(sink.path), "--",
           sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(HERE / "collector_small_job.py"), "5", "auto"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    # Both workers print to torchrun's stdout, so their lines may run together.
    decoder, text = json.JSONDecoder(), out.stdout
    results = [decoder.raw_decode(text, i)[0] for i in range(len(text))
               if text.startswith('{"rank"', i)]
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert all(r["installed"] for r in results)
    rows = [r for r in sink.op_rows() if r["t_end_ns"] != -1]
    assert Counter((r["rank"], r["op"]) for r in rows) == {
        (0, "all_reduce"): 5 + 2, (1, "all_reduce"): 5 + 2, (0, "isend"): 1, (1, "isend"): 1,
        (0, "irecv"): 1, (1, "irecv"): 1, (0, "barrier"): 1, (1, "barrier"): 1}
    # DDP's bucket (8*4 weights + 4 biases, float32) after 5 all_reduces and the barrier
    ddp = [r for r in rows if r["op"] == "all_reduce" and r["nbytes"] == (8 * 4 + 4) * 4]
    assert sorted((r["rank"], r["seq"]) for r in ddp) == [(0, 6), (0, 7), (1, 6), (1, 7)]
    assert {r["job"] for r in rows} == {"auto"}
    infos = [m.rank for m in sink.of_kind("rank")]
    assert sorted(i.rank for i in infos) == [0, 1] and sink.connections == 2
    assert {(i.job, i.attempt, i.world_size) for i in infos} == {("auto", 0, 2)}
