"""On a GPU machine: a real NCCL job through `c4 run`, with the hook's CUDA timing path and
NCCL's Inspector both on, and the two sources checked against each other.

Four ranks (on as many GPUs as there are, several to a GPU through ``NCCL_HOSTID``: see
tests/support/nccl_job.py) all_reduce on the world group and on pair groups. The hook's records
go through a real sidecar into a real daemon; the Inspector writes its dump directory, which
the sidecar of a second run follows live and ``c4 analyze --nccl-inspector`` reads offline.

Skipped where torch sees no CUDA device (CI, the development machine); the Inspector half is
skipped without ``C4_TEST_INSPECTOR_PLUGIN`` (a built ``libnccl-profiler-inspector.so``; see
tests/gpu/README.md). ``C4_TEST_ARTIFACTS``: a folder to keep the job's NCCL log and Inspector
output in (real recorded samples). The figures it prints are the check's result; the bounds
it asserts are loose on purpose (the clocks of two sources, not a benchmark)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from c4.processes import c4_command, python_path_env
from diagnosis.client import DaemonClient
from diagnosis.nccl.inspector import find_inspector_files, read_inspector_file
from diagnosis.nccl.ras import parse_ras
from diagnosis.nccl.ras_client import RasClient, RasError, ras_address
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.multiprocess, pytest.mark.network,
              pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="no CUDA device: the CUDA timing path and NCCL need one "
                                        "(run tests/gpu on a GPU machine)")]

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "nccl_job.py"
RANKS = 4
CALLS = 200
MB = 4
PLUGIN = os.environ.get("C4_TEST_INSPECTOR_PLUGIN", "")


def _nccl_env(tmp_path: Path, name: str) -> dict[str, str]:
    return {"C4_TEST_LOG": str(tmp_path / f"{name}-pids"), "C4_TEST_CALLS": str(CALLS),
            "C4_TEST_MB": str(MB), "OMP_NUM_THREADS": "1",
            # one machine: NCCL's socket transport over loopback, no InfiniBand
            "NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1",
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
            "NCCL_DEBUG_FILE": str(tmp_path / f"{name}-nccl.%h.%p.log"),
            **python_path_env()}


def _start_job(tmp_path: Path, name: str, run_args: list[str],
               extra: dict[str, str] | None = None) -> subprocess.Popen:
    cmd = [*c4_command("run", "--job", name, *run_args, "--"), sys.executable, "-m",
           "torch.distributed.run", "--standalone", "--nproc-per-node", str(RANKS), str(SCRIPT)]
    env = {**os.environ, **_nccl_env(tmp_path, name), **(extra or {})}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish_job(job: subprocess.Popen, tmp_path: Path, name: str) -> dict[int, int]:
    """Wait for the job's end; its ranks' pids by rank."""
    try:
        out, err = job.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
    assert job.returncode == 0, (out[-3000:], err[-5000:])
    return _pids(tmp_path, name)


def _pids(tmp_path: Path, name: str) -> dict[int, int]:
    pids = {int(p.stem[4:]): int(p.read_text()) for p in (tmp_path / f"{name}-pids").iterdir()}
    assert sorted(pids) == list(range(RANKS))
    return pids


def _run_job(tmp_path: Path, name: str, run_args: list[str],
             extra: dict[str, str] | None = None) -> dict[int, int]:
    """Run the job to its end; its ranks' pids by rank."""
    return _finish_job(_start_job(tmp_path, name, run_args, extra), tmp_path, name)


def _keep(tmp_path: Path, names: list[str]) -> None:
    dest = os.environ.get("C4_TEST_ARTIFACTS")
    if not dest:
        return
    Path(dest).mkdir(parents=True, exist_ok=True)
    for name in names:
        src = tmp_path / name
        if src.is_dir():
            shutil.copytree(src, Path(dest) / name, dirs_exist_ok=True)
        else:
            for f in tmp_path.glob(name):
                shutil.copy(f, Path(dest) / f.name)


def _hook_calls(client: DaemonClient, job: str, nbytes: int) -> dict[int, np.ndarray]:
    """The world all_reduce calls each rank's hook recorded: rows of (seq, enter, start, end)
    in ns, in seq order."""
    ops = client.ops(job)
    names = np.asarray(ops.strings, dtype=object)
    ranks_of_pg: dict[int, set[int]] = defaultdict(set)
    for pg, r in zip(ops["pg"].tolist(), ops["rank"].tolist(), strict=True):
        ranks_of_pg[pg].add(r)
    world = [pg for pg, rs in ranks_of_pg.items() if len(rs) == RANKS]
    sel = np.isin(ops["pg"], world) & (ops["nbytes"] == nbytes) \
        & (names[ops["op"]] == "all_reduce")
    out = {}
    for r in range(RANKS):
        m = sel & (ops["rank"] == r)
        order = np.argsort(ops["seq"][m], kind="stable")
        out[r] = np.stack([ops[c][m][order] for c in
                           ("seq", "t_enter_ns", "t_start_ns", "t_end_ns")], axis=1)
    return out


def _inspector_calls(root: Path, pids: dict[int, int], nbytes: int) -> dict[int, np.ndarray]:
    """The world AllReduce records the Inspector wrote for each rank (read by c4's reader,
    which names the operation as torch does): rows of (sn, exec us, kernel start us, kernel
    stop us), in sn order."""
    by_pid = {pid: r for r, pid in pids.items()}
    rows: dict[int, list[np.ndarray]] = defaultdict(list)
    for path in find_inspector_files(root):
        for b in read_inspector_file(path):
            pid = np.asarray([by_pid.get(p[1], -1) for p in b.procs])[b.proc]
            nranks = np.asarray([c.nranks for c in b.comms])[b.comm]
            op = np.asarray(b.ops, dtype=object)[b.op]
            m = (pid >= 0) & (nranks == RANKS) & (op == "all_reduce") & (b.msg_bytes == nbytes)
            for r in np.unique(pid[m]).tolist():
                k = m & (pid == r)
                rows[r].append(np.stack([b.sn[k], b.exec_us[k], b.kstart_us[k],
                                         b.kstop_us[k]], axis=1))
    out = {}
    for r, parts in rows.items():
        a = np.concatenate(parts)
        a = a[np.argsort(a[:, 0], kind="stable")]
        # a record dumped twice (periodic dumps re-read by a follower) counts once
        out[r] = a[np.unique(a[:, 0], return_index=True)[1]]
    return out


def _analyze(dump: Path, *more: str) -> list[dict]:
    """``c4 analyze --nccl-inspector DUMP [MORE...]``'s reports."""
    out = subprocess.run([*c4_command("analyze", "--nccl-inspector", str(dump), *more,
                                      "--format", "json")],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, **python_path_env()})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)["reports"]


def _hooked(services: tuple[Path, int, list], dump: Path) -> list[str]:
    """``c4 run`` arguments for a job reporting through the hook to a new sidecar of the
    daemon, with the Inspector writing into ``dump`` where a plugin is given."""
    tmp_path, port, started = services
    car, sock = start_sidecar(tmp_path, port, "gpu0")
    started.append(car)
    args = ["--sidecar-socket", str(sock)]
    if PLUGIN:
        args += [f"--nccl-inspector={dump}", "--nccl-profiler-plugin", PLUGIN]
    return args


@pytest.fixture()
def services(tmp_path):
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    started = [daemon]
    try:
        yield tmp_path, port, started
    finally:
        for s in reversed(started):
            s.stop()


def test_hook_cuda_timing_agrees_with_the_inspector(services, capsys):
    tmp_path, port, _ = services
    dump = tmp_path / "inspector"
    pids = _run_job(tmp_path, "gpu-hook", _hooked(services, dump))
    nbytes = (MB << 20) // 4 * 4
    with DaemonClient(f"127.0.0.1:{port}") as client:
        wait_for(lambda: all(len(v) >= CALLS for v in
                             _hook_calls(client, "gpu-hook", nbytes).values()), 60,
                 what="every rank's world all_reduce calls in the daemon")
        hook = _hook_calls(client, "gpu-hook", nbytes)
        faults = client.faults("gpu-hook")
    _keep(tmp_path, ["gpu-hook-nccl.*.log", "inspector"])

    lines = [f"device: {torch.cuda.get_device_name(0)}, NCCL {torch.cuda.nccl.version()}, "
             f"{RANKS} ranks on {torch.cuda.device_count()} GPU(s), {CALLS} calls of {MB} MiB"]
    for r, a in hook.items():
        assert len(a) == CALLS, f"rank {r}: {len(a)} world all_reduce records, want {CALLS}"
        seq, enter, start, end = a.T
        assert (np.diff(seq) == 1).all(), f"rank {r}: seq not consecutive"
        # GPU-timed: start and end are CUDA events' times, moved to the wall clock through
        # the timer's anchor event
        assert (start > 0).all(), f"rank {r}: calls without a GPU start (not CUDA-timed)"
        assert (end > start).all(), f"rank {r}: a call that ends before it starts"
        # the rank's arrival: its stream's start (its CPU enqueued the call earlier)
        assert (enter >= start).all(), f"rank {r}: entry before the stream reached the call"
        lines.append(f"rank {r} hook: GPU duration median {np.median(end - start) / 1e3:.0f} "
                     f"us, p95 {np.percentile(end - start, 95) / 1e3:.0f} us")
    # the CPUs ran ahead of the GPU by up to the whole job: no hang in that
    assert not [f for f in faults if f.kind in ("comm_hang", "noncomm_hang", "error")], \
        [f.summary for f in faults]
    lines += [f"report: {f.kind} {f.state}: {f.summary[:160]}" for f in faults]

    if PLUGIN:
        insp = _inspector_calls(dump, pids, nbytes)
        assert sorted(insp) == list(range(RANKS)), f"Inspector ranks: {sorted(insp)}"
        for r in range(RANKS):
            h, i = hook[r], insp[r]
            # the same calls: every world all_reduce of the job, in both
            assert len(i) == len(h), f"rank {r}: Inspector {len(i)} records, hook {len(h)}"
            dur_hook = (h[:, 3] - h[:, 2]) / 1e3
            exec_us = i[:, 1].astype(float)
            ratio = dur_hook / np.maximum(exec_us, 1.0)
            # the hook's events bracket the kernel on the caller's stream: never much shorter
            assert np.percentile(ratio, 5) > 0.8, f"rank {r}: hook/Inspector {ratio}"
            assert np.median(ratio) < 5.0, f"rank {r}: hook/Inspector {ratio}"
            line = (f"rank {r} Inspector: kernel median {np.median(exec_us):.0f} us; hook "
                    f"duration / Inspector kernel time median {np.median(ratio):.2f} "
                    f"(p5 {np.percentile(ratio, 5):.2f}, p95 {np.percentile(ratio, 95):.2f})")
            if (i[:, 3] > 0).all():
                # the Inspector's stop is the wall clock when its plugin saw the kernel end;
                # the hook's, a GPU event's time moved to the wall clock through an anchor
                off = (h[:, 3] / 1e3 - i[:, 3]) / 1e3
                line += (f"; hook end - Inspector kernel stop median {np.median(off):.3f} ms "
                         f"(p5 {np.percentile(off, 5):.3f}, p95 {np.percentile(off, 95):.3f})")
                assert abs(np.median(off)) < 50, f"rank {r}: clocks {np.median(off)} ms apart"
            lines.append(line)
        offline = _analyze(dump)
        lines.append(f"c4 analyze --nccl-inspector: {[r['kind'] for r in offline]}")
        assert not [r for r in offline if r["kind"] in ("comm_hang", "noncomm_hang", "error")], \
            offline
    with capsys.disabled():
        print("\n" + "\n".join(lines))


@pytest.mark.skipif(not PLUGIN, reason="C4_TEST_INSPECTOR_PLUGIN is not set (the Inspector "
                                       "library to load; see tests/gpu/README.md)")
def test_sidecar_follows_the_inspector_of_a_job_without_the_hook(services, capsys):
    tmp_path, port, started = services
    dump = tmp_path / "inspector-live"
    dump.mkdir()
    car, _ = start_sidecar(tmp_path, port, "gpu0", extra=["--nccl-job", "gpu-insp",
                                                           "--nccl-inspector", str(dump)])
    started.append(car)
    pids = _run_job(tmp_path, "gpu-insp", ["--no-collect", f"--nccl-inspector={dump}",
                                           "--nccl-profiler-plugin", PLUGIN])
    nbytes = (MB << 20) // 4 * 4
    with DaemonClient(f"127.0.0.1:{port}") as client:
        wait_for(lambda: all(len(v) >= CALLS for v in
                             _hook_calls(client, "gpu-insp", nbytes).values()), 60,
                 what="every rank's world AllReduce from the followed Inspector directory")
        live = _hook_calls(client, "gpu-insp", nbytes)
    insp = _inspector_calls(dump, pids, nbytes)
    for r in range(RANKS):
        assert len(live[r]) == len(insp[r]) == CALLS, (r, len(live[r]), len(insp[r]))
        # the live records carry the Inspector's own kernel times, converted to ns
        np.testing.assert_allclose((live[r][:, 3] - live[r][:, 1]) / 1e3,
                                   insp[r][:, 1], atol=1)
    _keep(tmp_path, ["gpu-insp-nccl.*.log"])
    with capsys.disabled():
        print(f"\nsidecar following the Inspector: {RANKS} ranks x {CALLS} world AllReduce "
              "records in the daemon, kernel times as written")


def test_a_slow_gpu_is_named_from_the_hook_and_from_the_inspector(services, capsys):
    # rank 2's stream spins 20 ms before each call from call 150 on: its CPU enqueues as fast
    # as the others', so only the stream's arrival shows who is late
    tmp_path, port, _ = services
    dump = tmp_path / "inspector-slow"
    _run_job(tmp_path, "gpu-slow", _hooked(services, dump),
             {"C4_TEST_CALLS": "400", "C4_TEST_SLOW_RANK": "2", "C4_TEST_SLOW_FROM": "150",
              "C4_TEST_SLOW_MS": "20"})
    seen: list[str] = []

    def named():
        with DaemonClient(f"127.0.0.1:{port}") as client:
            faults = client.faults("gpu-slow")
        seen[:] = [f"{f.kind} {[(s.id, s.rank, round(s.score, 2)) for s in f.suspects[:3]]}"
                   for f in faults]
        return [f for f in faults if f.kind == "noncomm_slow" and f.suspects[0].rank == 2]

    try:
        report = wait_for(named, 60, interval=1.0, what="a slow-GPU report naming rank 2")[0]
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; reports: {seen}") from None
    lines = [f"hook: {report.kind} on rank 2: {report.summary[:200]}", f"all: {seen}"]
    if PLUGIN:
        _keep(tmp_path, ["inspector-slow"])
        offline = _analyze(dump)
        lines.append("c4 analyze --nccl-inspector: " + "; ".join(
            f"{r['kind']} {[(x['id'], x.get('rank')) for x in r['suspects'][:3]]}"
            for r in offline))
        assert [r for r in offline if r["kind"] == "noncomm_slow"
                and r["suspects"][0].get("rank") == 2], offline
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def _ask_ras(verbose: bool = False, json_ok: bool = True, timeout_s: float = 5.0) -> str:
    """A status report from the node's real NCCL RAS, or why there is none."""
    t0 = time.monotonic()
    try:
        return RasClient(address=ras_address(), timeout_s=timeout_s,
                         json_ok=json_ok).status(verbose)[0]
    except RasError as exc:
        return f"no report after {time.monotonic() - t0:.1f} s: {exc}"


def _p2p_by_rank(names: np.ndarray, ranks: np.ndarray, peers: np.ndarray,
                 sends: tuple[str, ...]) -> dict[int, tuple[int, int, set[int]]]:
    """Per rank: (sends, receives, the peers it sent to)."""
    out = {}
    for r in range(RANKS):
        m = ranks == r
        is_send = np.isin(names[m], sends)
        out[r] = (int(is_send.sum()), int((~is_send).sum()), set(peers[m][is_send].tolist()))
    return out


def test_a_stopped_rank_seen_by_the_hook_the_inspector_and_real_ras(services, capsys):
    # rank 3 sleeps 40 s in Python before round 100 (its GPU idle, its RAS thread alive) while
    # ranks 0-2 wait for it inside that round's all_reduce; for a few seconds of it the whole
    # process is SIGSTOPped (RAS's own thread too). Each round also passes a tensor around
    # the ring (send/recv), which the 2.30 Inspector records as p2p_perf lines.
    tmp_path, port, _ = services
    dump, mark = tmp_path / "inspector-hang", tmp_path / "stopped"
    job = _start_job(tmp_path, "gpu-hang", _hooked(services, dump),
                     {"C4_TEST_P2P": "1", "C4_TEST_STOP_RANK": "3", "C4_TEST_STOP_AT": "100",
                      "C4_TEST_STOP_S": "40", "C4_TEST_STOP_MARK": str(mark)})
    ras: dict[str, str] = {}
    seen: list[str] = []
    hang = None
    try:
        wait_for(mark.exists, 120, what="rank 3 stopping before round 100")
        pid3 = _pids(tmp_path, "gpu-hang")[3]

        def hung():
            with DaemonClient(f"127.0.0.1:{port}") as client:
                faults = client.faults("gpu-hang")
            seen[:] = [f"{f.kind} {[(s.id, s.rank) for s in f.suspects[:3]]}: "
                       f"{f.summary[:160]}" for f in faults]
            return [f for f in faults if f.kind.endswith("hang")]

        with contextlib.suppress(AssertionError):   # (wait_for's timeout)
            hang = wait_for(hung, 15, interval=0.5, what="a hang report")[0]
        ras["idle.json"] = _ask_ras()
        ras["idle.txt"] = _ask_ras(json_ok=False)
        ras["idle-verbose.txt"] = _ask_ras(verbose=True, json_ok=False)
        os.kill(pid3, signal.SIGSTOP)
        try:
            time.sleep(2.0)
            ras["frozen.json"] = _ask_ras(timeout_s=10)
            ras["frozen.txt"] = _ask_ras(json_ok=False, timeout_s=10)
        finally:
            os.kill(pid3, signal.SIGCONT)
    finally:
        pids = _finish_job(job, tmp_path, "gpu-hang")
    for name, body in ras.items():
        (tmp_path / f"ras-{name}").write_text(body)
    _keep(tmp_path, ["ras-*", "gpu-hang-nccl.*.log", "inspector-hang"])

    def say(line: str) -> None:
        with capsys.disabled():
            print(line, flush=True)

    say(f"\ndaemon, while rank 3 slept: {seen}")
    for name, text in ras.items():
        say(f"RAS {name}: {text[:300]!r}")

    failed: list[str] = []   # every check runs: one GPU run should tell all it can

    # the hook named rank 3 while it slept
    if hang is None or hang.suspects[0].rank != 3:
        failed.append(f"no hang report naming rank 3 while it slept; reports: {seen}")

    # send/recv: the hook's rows against the Inspector's p2p_perf lines (2.30 plugin only)
    with DaemonClient(f"127.0.0.1:{port}") as client:
        ops = client.ops("gpu-hang")
    names = np.asarray(ops.strings, dtype=object)[ops["op"]]
    p2p = np.isin(names, ("isend", "irecv"))
    hook = _p2p_by_rank(names[p2p], ops["rank"][p2p], ops["peer"][p2p], ("isend",))
    say(f"hook send/recv per rank (sends, recvs, sent to): {hook}")
    by_pid = {pid: r for r, pid in pids.items()}
    i_names, i_ranks, i_peers = [], [], []
    for path in find_inspector_files(dump):
        for b in read_inspector_file(path):
            rank = np.asarray([by_pid.get(p[1], -1) for p in b.procs])[b.proc]
            op = np.asarray(b.ops, dtype=object)[b.op]
            m = np.isin(op, ("send", "recv"))
            i_names.append(op[m])
            i_ranks.append(rank[m])
            i_peers.append(b.peer[m])
    if sum(len(x) for x in i_names):
        insp = _p2p_by_rank(np.concatenate(i_names), np.concatenate(i_ranks),
                            np.concatenate(i_peers), ("send",))
        say(f"Inspector p2p per rank (sends, recvs, sent to): {insp}")
        failed += [f"rank {r}: Inspector p2p {insp[r]}, hook {hook[r]}" for r in range(RANKS)
                   if insp[r] != hook[r]]
    else:
        say("Inspector p2p: none (this plugin writes no p2p_perf lines)")
    if PLUGIN:
        offline = _analyze(dump, "--ncclras", str(tmp_path / "ras-idle.json"))
        say("c4 analyze --nccl-inspector --ncclras: " + "; ".join(
            f"{r['kind']} {[(x['id'], x.get('rank')) for x in r['suspects'][:3]]}"
            for r in offline))

    # what real RAS said, through c4's parser
    for name in ("idle.txt", "idle-verbose.txt", "frozen.json", "frozen.txt"):
        snaps = parse_ras(ras[name], name)
        say(f"RAS {name} parsed: {len(snaps)} report(s), "
            f"{sum(len(x.entries) for x in snaps)} entries, "
            f"{sum(len(x.dead) + len(x.incomplete) for x in snaps)} dead/incomplete")
    idle = parse_ras(ras["idle.json"], "idle.json")
    world = [c for c in idle[0].comms if c.size == RANKS] if idle else []
    if not world:
        failed.append(f"no communicator of {RANKS} ranks in RAS's JSON report: "
                      f"{ras['idle.json'][:300]!r}")
    else:
        counts = {m.rank: m.counts.get("AllReduce") for m in world[0].ranks}
        say(f"RAS AllReduce counts on the world communicator, rank 3 asleep: {counts}")
        # ranks 0-2 launched round 100's all_reduce (and their CPUs went on launching), rank 3
        # did not
        if counts.get(3) is None or not all(counts[3] < (counts.get(r) or 0) for r in (0, 1, 2)):
            failed.append(f"RAS counts do not single out rank 3: {counts}")
    assert not failed, failed
