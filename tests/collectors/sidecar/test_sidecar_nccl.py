"""The sidecar follows an NCCL Inspector dump directory and ships its calls to the daemon (real
daemon, real sidecar, real processes whose environment names their rank); files that grow,
a file rotated under it, and processes whose c4 hook reports already are skipped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import orjson
import pytest

from diagnosis.client import DaemonClient
from tests.support.ras_server import RasServer
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for

pytestmark = [pytest.mark.network]


def _line(pid: int, rank: int, sn: int, t_us: int, n_ranks: int = 3, nnodes: int = 1
          ) -> bytes:
    return orjson.dumps({
        "header": {"id": "0x7f8c496ae9f661", "comm_name": "DP Group 0", "rank": rank,
                   "n_ranks": n_ranks, "nnodes": nnodes},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                     "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": t_us,
                     "hostname": socket.gethostname(), "pid": pid},
        "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 1 << 20,
                      "coll_exec_time_us": 150, "coll_timing_source": "kernel_gpu",
                      "coll_algobw_gbs": 7.0, "coll_busbw_gbs": 9.3}}) + b"\n"


def _send_line(pid: int, rank: int, op: str, peer: int, sn: int, t_us: int) -> bytes:
    """A point-to-point call of the 4-rank communicator ``_line(..., 4, 2)`` writes."""
    return orjson.dumps({
        "header": {"id": "0x7f8c496ae9f661", "comm_name": "DP Group 0", "rank": rank,
                   "n_ranks": 4, "nnodes": 2},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                     "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": t_us,
                     "hostname": socket.gethostname(), "pid": pid},
        "p2p_perf": {"p2p": op, "p2p_sn": sn, "p2p_peer": peer, "p2p_msg_size_bytes": 1 << 20,
                     "p2p_exec_time_us": 90, "p2p_timing_source": "kernel_gpu",
                     "p2p_algobw_gbs": "nan", "p2p_busbw_gbs": "nan"}}) + b"\n"


# recent: the daemon refuses records far behind its clock
_T0_US = int(time.time() * 1e6) - 60_000_000


def _write(path, pid, rank, sns, mode="ab"):
    with open(path, mode) as fh:
        fh.write(b"".join(_line(pid, rank, s, _T0_US + 1000 * s) for s in sns))


def _stored(client, job):
    cols = client.ops(job)
    return sorted(zip(cols["rank"].tolist(), cols["seq"].tolist()))


_HOOK = """
import sys, time
from tests.support.frames import RankConnection, group_info, op_batch, rank_info
c = RankConnection(sys.argv[1])
c.send(rank_info("nj", 2, 3, "node0"), group_info("nj", "0", [0, 1, 2]),
       op_batch("nj", 2, range(0, 5)))
time.sleep(300)
"""


def test_inspector_directory_shipped_through_the_sidecar(tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    car, sock = start_sidecar(tmp_path, port, "node0", extra=[
        "--nccl-job", "nj", "--nccl-inspector", str(dumps), "--nccl-interval", "0.1"])
    # three processes of one job, each with the RANK its launcher gave it; rank 2 runs c4's
    # torch hook too (here: the frames it would send), so its Inspector lines must not be
    # shipped a second time
    env = {**os.environ, "WORLD_SIZE": "3"}
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              env={**env, "RANK": str(r)}) for r in range(2)]
    procs.append(subprocess.Popen([sys.executable, "-c", _HOOK, str(sock)],
                                  env={**env, "RANK": "2"}))
    try:
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: _stored(client, "nj") == [(2, s) for s in range(5)], 30,
                     what="the hooked rank's calls")
            host = socket.gethostname()
            files = [dumps / f"{host}-pid{p.pid}.log" for p in procs]
            for r in range(3):
                _write(files[r], procs[r].pid, r, range(0, 5), "wb")
            want = sorted((r, s) for r in range(3) for s in range(5))
            wait_for(lambda: _stored(client, "nj") == want, 30, what="the first 5 calls")
            ranks = {r.rank: (r.host, r.pid) for r in client.ranks("nj")}
            assert ranks == {r: ("node0", procs[r].pid) for r in range(3)}
            # the files grow; rank 0's is rotated (renamed) with lines still unread in it,
            # and its process goes on writing a new file at the old name
            _write(files[0], procs[0].pid, 0, range(5, 8))
            files[0].rename(files[0].with_name(files[0].name + ".1"))
            _write(files[0], procs[0].pid, 0, range(8, 10), "wb")
            _write(files[1], procs[1].pid, 1, range(5, 10))
            want = sorted([(r, s) for r in (0, 1) for s in range(10)] +
                          [(2, s) for s in range(5)])
            wait_for(lambda: _stored(client, "nj") == want, 30,
                     what="calls 5-9 of ranks 0 and 1, once each")
            # what it ships from NCCL counts in what leaves the node, like the hook's records
            wait_for(lambda: client.status().sidecars[0].stats.records_out >= 5 + 2 * 10, 30,
                     what="the Inspector's rows counted in the sidecar's records_out")
        assert "Traceback" not in car.output()
        assert "rejected" not in daemon.output() and "ignored" not in daemon.output()
    finally:
        car.stop()
        daemon.stop()
        for p in procs:
            p.kill()
            p.wait()


def test_a_communicator_spanning_two_nodes_is_joined_from_both_sidecars(tmp_path,
                                                                       monkeypatch):
    # one 4-rank communicator, ranks 0-1 on node0 and 2-3 on node1, each node's sidecar
    # following its own Inspector directory: neither sees the whole group, each ships its
    # part, and the daemon stores the group once both parts are in. The daemon restarts
    # between the two parts (it keeps parts in memory only): node0 repeats its part.
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    env = {**os.environ, "WORLD_SIZE": "4"}
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              env={**env, "RANK": str(r)}) for r in range(4)]
    cars = []
    host = socket.gethostname()
    try:
        for node in range(2):
            dumps = tmp_path / f"dumps{node}"
            dumps.mkdir()
            for r in (2 * node, 2 * node + 1):
                with open(dumps / f"{host}-pid{procs[r].pid}.log", "wb") as fh:
                    fh.write(b"".join(_line(procs[r].pid, r, sn, _T0_US + 1000 * sn, 4, 2)
                                      for sn in range(5)))
            with monkeypatch.context() as env:
                env.setenv("C4_LOG_LEVEL", "INFO")    # to see the joined group arrive
                car, _ = start_sidecar(tmp_path, port, f"node{node}", extra=[
                    "--nccl-job", "nj", "--nccl-inspector", str(dumps), "--nccl-interval",
                    "0.1", "--nccl-parts-every", "1"])
            cars.append(car)
            if node == 0:
                with DaemonClient(f"127.0.0.1:{port}") as client:
                    wait_for(lambda: len(_stored(client, "nj")) == 10, 30,
                             what="node0's calls")
                    # half a communicator is no group
                    assert client.groups("nj") == []
                daemon.stop()
                daemon = start_daemon(tmp_path, port)
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: len(_stored(client, "nj")) == 20, 30, what="node1's calls")
            groups = wait_for(lambda: client.groups("nj"), 30, what="the joined group")
            assert [list(g.ranks) for g in groups] == [[0, 1, 2, 3]]
            ranks = {r.rank: r.host for r in client.ranks("nj")}
            assert ranks == {0: "node0", 1: "node0", 2: "node1", 3: "node1"}
            # the daemon sends the joined group to both nodes: a send from rank 1 (node0) to
            # the communicator's rank 2 (node1) now names its peer's global rank
            for car in cars:
                wait_for(lambda car=car: "across nodes (joined by the daemon)" in car.output(),
                         30, what="the joined group at each sidecar")
            t_us = _T0_US + 10_000
            with open(tmp_path / "dumps0" / f"{host}-pid{procs[1].pid}.log", "ab") as fh:
                fh.write(_send_line(procs[1].pid, 1, "Send", 2, 1, t_us))
            with open(tmp_path / "dumps1" / f"{host}-pid{procs[2].pid}.log", "ab") as fh:
                fh.write(_send_line(procs[2].pid, 2, "Recv", 1, 1, t_us))

            def p2p():
                cols = client.ops("nj")
                if len(cols) < 22:
                    return None
                return sorted((r, p) for r, p in zip(cols["rank"].tolist(),
                                                     cols["peer"].tolist(), strict=True)
                              if p != -1)

            assert wait_for(p2p, 30, what="the send and the receive") == [(1, 2), (2, 1)]
        for car in cars:
            assert "Traceback" not in car.output()
        assert "rejected" not in daemon.output()
    finally:
        for car in cars:
            car.stop()
        daemon.stop()
        for p in procs:
            p.kill()
            p.wait()


def _ras_report(pids: list[int], launched: list[int]) -> str:
    """An ``ncclras`` JSON status (as NCCL 2.28 writes it) of one 3-rank communicator whose
    ranks launched ``launched`` AllReduces; its hash is whole where the Inspector cuts it."""
    ranks = [{"rank": r, "host": "127.0.0.1", "pid": pid, "cuda_dev": r, "nvml_dev": r,
              "status": {"init_state": 0, "async_error": 0, "finalize_called": False,
                         "destroy_flag": False, "abort_flag": False},
              "collective_counts": {"Broadcast": 0, "Reduce": 0, "AllGather": 0,
                                    "ReduceScatter": 0, "AllReduce": n}}
             for r, (pid, n) in enumerate(zip(pids, launched, strict=True))]
    return orjson.dumps({
        "nccl_version": "2.28.9", "cuda_runtime_version": 13000, "cuda_driver_version": 13000,
        "timestamp": time.strftime("%Y-%m-%d %H:%M:%S"), "communicators_count": 1,
        "communicators": [{"hash": "0x7f8c496ae9f661ab", "secondary_hash": "0x1:0x2",
                           "size": 3, "ranks_count": 3, "missing_ranks_count": 0,
                           "ranks": ranks, "missing_ranks": []}],
        "ras": {"collection_time_sec": 0.0, "timeouts_count": 0}}).decode()


def test_a_rank_ras_shows_behind_is_named_by_the_daemon(tmp_path):
    # three processes write Inspector lines for calls 0-9, then ranks 0 and 1 launch call 10
    # (RAS counts 11 AllReduces) and rank 2 never does (10): the Inspector writes nothing more
    # (it writes finished calls only), and only RAS's progress, shipped by the sidecar, shows
    # who the others wait for
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    env = {**os.environ, "WORLD_SIZE": "3"}
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              env={**env, "RANK": str(r)}) for r in range(3)]
    pids = [p.pid for p in procs]
    launched = [10, 10, 10]
    ras = RasServer(lambda: _ras_report(pids, launched))
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    car, _ = start_sidecar(tmp_path, port, "node0", extra=[
        "--nccl-job", "nj", "--nccl-inspector", str(dumps), "--nccl-interval", "0.1",
        "--nccl-ras", f"127.0.0.1:{ras.port}", "--nccl-ras-interval", "0.5"])
    try:
        host = socket.gethostname()
        now_us = int(time.time() * 1e6)
        for r in range(3):
            with open(dumps / f"{host}-pid{pids[r]}.log", "wb") as fh:
                fh.write(b"".join(_line(pids[r], r, s, now_us - 20_000_000 + 10_000 * s)
                                  for s in range(10)))
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: len(_stored(client, "nj")) == 30, 30, what="calls 0-9")
            launched[:] = [11, 11, 10]
            seen: list[str] = []

            def named():
                faults = client.faults("nj")
                seen[:] = [f"{f.kind}: {f.summary}" for f in faults]
                return [f for f in faults if f.kind == "noncomm_hang"]

            try:
                (hang,) = wait_for(named, 60, interval=0.5, what="a hang report")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; reports: {seen}") from None
            assert [s.rank for s in hang.suspects[:1]] == [2] and hang.seq == 10, seen
            assert not [f for f in client.faults("nj") if f.kind == "comm_hang"], seen
        assert "Traceback" not in car.output()
    finally:
        car.stop()
        daemon.stop()
        ras.close()
        for p in procs:
            p.kill()
            p.wait()
