"""Every recorded sample that is not an Inspector JSON line (those are in
test_nccl_inspector.py) read to exactly what it shows: ncclras status (JSON and each text
section) and monitor events, the Inspector's Prometheus files, the example profiler's Chrome
trace, a CoMMA latency record, NCCL_DEBUG and PyTorch watchdog lines."""

from __future__ import annotations

from diagnosis.nccl.comma import read_comma_file
from diagnosis.nccl.logs import read_logs
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.profiler_trace import read_trace_file
from diagnosis.nccl.prometheus import parse_labels, parse_prom, read_prom_file
from diagnosis.nccl.ras import RasMember, RasPeer, parse_ras_text, read_ras_file
from diagnosis.nccl.ras_monitor import read_monitor_file
from diagnosis.nccl.records import CommKey
from tests.diagnosis.nccl.support import fixture, local_ns


def _text(name: str, t_ns: int = 7):
    path = fixture(name)
    return parse_ras_text(path.read_text(), str(path), t_ns=t_ns)


# ----- ncclras ---------------------------------------------------------------------------------
def test_ras_status_json():
    (snap,) = read_ras_file(fixture("ncclras_status.json"))
    assert (snap.format, snap.nccl_version, snap.cuda_runtime, snap.cuda_driver) == (
        "json", "2.29.1", 13000, 13000)
    assert snap.t_ns == local_ns("2025-12-19 13:06:53")
    assert (snap.timeouts, snap.collection_s) == (0, 0.0)
    (comm,) = snap.comms
    assert comm.hash == 0xAE94423CFBB2EF4A and comm.size == 2
    assert comm.secondary_hash == "0xb7e7187447156001:0xb8242ed28a71381e"
    (r,) = comm.ranks
    assert (r.rank, r.host, r.pid, r.cuda_dev, r.nvml_dev) == (0, "172.16.64.245", 1524344, 0, 0)
    assert (r.init_state, r.async_error, r.finalize_called, r.destroy_flag, r.abort_flag) == (
        0, 0, False, False, False)
    assert r.counts == {"Broadcast": 0, "Reduce": 0, "AllGather": 0, "ReduceScatter": 0,
                        "AllReduce": 0}
    assert not r.failed
    (m,) = comm.missing
    assert (m.rank, m.host, m.pid, m.cuda_dev, m.nvml_dev) == (1, "172.16.64.245", 1524345, 1, 1)
    assert (m.unresponsive, m.considered_dead) == (True, False)


def test_ras_text_job_summary():
    s = _text("ncclras_text_job_summary.txt")
    assert s.format == "text" and s.t_ns == 7
    assert s.summary == {"nodes": 4, "processes_per_node": 8, "gpus_per_process": 1,
                         "processes": 32, "gpus": 32}


def test_ras_text_communicator_rows():
    ok = _text("ncclras_text_comms_running_ok.txt")
    assert ok.collection_s == 0.0
    (row,) = ok.groups
    assert (row.group, row.comms, row.nodes, row.ranks_per_node, row.ranks_per_comm,
            row.ranks_in_group, row.status, row.errors) == (0, 8, 4, "1", 4, 32, "RUNNING", "OK")
    (row,) = _text("ncclras_text_comms_mismatch_row.txt").groups
    assert (row.comms, row.nodes, row.ranks_per_node, row.ranks_per_comm, row.status,
            row.errors) == (1, 4, "8", 32, "RUNNING", "MISMATCH")


def test_ras_text_init_and_teardown_mismatch():
    s = _text("ncclras_text_init_teardown_mismatch.txt")
    assert [(g.group, g.comms, g.ranks_per_node, g.ranks_per_comm, g.ranks_in_group, g.status,
             g.errors) for g in s.groups] == [
        (0, 1, "1-2", 32, 32, "FINALIZE", "MISMATCH"), (1, 7, "1", 4, 28, "RUNNING", "OK"),
        (2, 1, "1", 4, 4, "INIT", "OK")]
    (e,) = s.entries                                  # the "[...]" elision is skipped
    assert (e.group, e.index, e.hash, e.what) == (0, 0, 0x9E17999AFAA87DBB, "status")
    assert e.buckets == ((26, "UNKNOWN"), (4, "RUNNING"), (2, "FINALIZE"))
    assert e.members == (
        RasMember(0, 0, 507285, "172.16.64.210", "RUNNING"),
        RasMember(8, 0, 1598388, "172.16.64.212", "RUNNING"),
        RasMember(16, 0, 3500071, "172.16.64.213", "RUNNING"),
        RasMember(24, 0, 2405067, "172.16.64.222", "RUNNING"),
        RasMember(4, 4, 507289, "172.16.64.210", "FINALIZE"),
        RasMember(20, 4, 3500075, "172.16.64.213", "FINALIZE"))


def test_ras_text_operation_count_mismatch():
    (e,) = _text("ncclras_text_warnings_mismatch.txt").entries
    assert (e.hash, e.what) == (0x27A079B828FF1A75, "counts")
    assert e.buckets == ((26, 6650), (6, 6649))
    # the six listed ranks are the minority: behind, at 6649
    assert [(m.rank, m.gpu, m.pid, m.node, m.value) for m in e.members] == [
        (r, r, 483072 + r, "172.16.64.210", 6649) for r in (0, 2, 3, 4, 5, 7)]


def test_ras_text_errors_incomplete_and_dead():
    inc = _text("ncclras_text_errors_incomplete.txt")
    assert (inc.collection_s, inc.timeouts) == (2.05, 2)
    (row,) = inc.groups
    assert (row.ranks_per_node, row.errors) == ("7-8", "INCOMPLETE")
    assert inc.incomplete == (RasPeer(3487984, "172.16.64.213", (5,)),) and inc.dead == ()
    (e,) = inc.entries
    assert (e.hash, e.what) == (0xCF264AF53EDBE986, "missing")
    assert [(m.rank, m.value) for m in e.members] == [(21, "missing")]
    dead = _text("ncclras_text_errors_dead.txt")
    assert dead.dead == (RasPeer(3487984, "172.16.64.213", (5,)),) and dead.incomplete == ()
    assert [m.rank for m in dead.entries[0].members] == [21]


def test_ras_monitor_events_text_and_json_agree():
    problems = Problems()
    assert read_monitor_file(fixture("ncclras_monitor_banner.txt"), problems) == []
    (t,) = read_monitor_file(fixture("ncclras_monitor_event.txt"), problems)
    (j,) = read_monitor_file(fixture("ncclras_monitor_event.json"), problems)
    for e in (t, j):
        assert (e.t_ns, e.group, e.event, e.host, e.pid, e.gpus, e.details) == (
            local_ns("2025-12-19 13:07:07"), "LIFECYCLE", "PEER_DEAD", "172.16.64.245",
            1524345, (1,), "")
        assert e.bad
    assert len(problems) == 0


# ----- Inspector Prometheus files --------------------------------------------------------------
def test_prometheus_230_aggregates():
    p = read_prom_file(fixture("inspector_prometheus_sample.prom"))
    assert [(s.metric, s.value, s.line) for s in p.samples] == [
        ("nccl_bus_bandwidth_gbs", 678.263, 1),
        ("nccl_collective_exec_time_microseconds", 9498.47, 2),
        ("nccl_p2p_bus_bandwidth_gbs", 464.9, 3),
        ("nccl_p2p_exec_time_microseconds", 1154.87, 4)]
    first = p.samples[0].labels
    assert first == {"version": "v5.1", "slurm_job_id": "unknown", "node": "nvl72004-T01",
                     "gpu": "GPU0", "comm_name": "DP Group 0", "n_nodes": "1", "nranks": "4",
                     "collective": "AllReduce", "message_size": "4-5GB",
                     "algo_proto": "Ring_ll"}
    assert p.samples[2].labels["p2p_operation"] == "Send"
    assert len(p.ops()) == 0          # aggregates over a window: no single operation in them


def test_prometheus_2297_per_op_labels():
    path = fixture("inspector_prom_labels_nccl-2.29.7.txt")
    text = path.read_text().strip()
    problems = Problems()
    assert read_prom_file(path, problems).samples == []       # labels only: not a sample
    assert problems.counts["prom_line"] == 1
    lab = parse_labels(text)
    assert lab == {"comm_id": "0xd152c00f111816", "collective": "AllReduce",
                   "hostname": "pool0-0002", "rank": "4", "slurm_job": "unknown",
                   "slurm_job_id": "unknown", "n_ranks": "8", "n_nodes": "1",
                   "coll_sn": "228924", "timestamp": "2025-10-17T03:31:47Z",
                   "gpu_device_id": "GPU4", "message_size": "2.00GB"}
    # the same labels on the metrics 2.29.7 wrote: one operation
    p = parse_prom(f"nccl_collective_exec_time_microseconds{{{text}}} 4105.5\n"
                   f"nccl_bus_bandwidth_gbs{{{text}}} 912.25\n", "m.prom")
    (r,) = p.ops().records()
    assert r.comm == CommKey(0xD152C00F111816, 4, 8, 1, None)     # n_ranks (README) read too
    assert (r.hostname, r.pid, r.op, r.sn, r.msg_bytes) == (
        "pool0-0002", -5, "all_reduce", 228924, 2 << 30)     # 1024-based units
    assert r.dump_us == 1760671907 * 10**6 and r.exec_us == 4106 and r.busbw_gbs == 912.25


# ----- the example profiler plugin's Chrome trace ---------------------------------------------
def test_profiler_chrome_trace_readme_sample():
    problems = Problems()
    t = read_trace_file(fixture("profiler_example_chrome_trace_readme.json"), problems)
    # 23 begin events (one behind a curly quote), 21 ends: 18 pairs; the 3 ends after the
    # "trace truncated" line have no begin, and 5 begins have no end
    assert len(t.spans) == 23 and t.unmatched == 5 and problems.counts["unmatched"] == 1
    assert [s.end_us is None for s in t.spans].count(True) == 5
    assert {s.line: s.name for s in t.spans}[11] == "RecvWait"
    (call,) = t.calls
    assert (call.comm, call.rank, call.op, call.sn, call.peer, call.count, call.datatype) == (
        1493613951195738943, 0, "all_reduce", 0, -1, 262144, "ncclFloat32")
    assert (call.kernel_start_ns, call.kernel_stop_ns) == (1756135989724672000,
                                                           1756135989732831232)
    recv, send = call.transfers
    assert (recv.send, recv.channel, recv.peer, recv.steps, recv.chunk, recv.nbytes) == (
        False, 0, 1, 4, 4194304, 524288)
    assert (recv.begin_us, recv.end_us) == (119686.300995, 120165.356995)
    assert (send.send, send.peer, send.begin_us, send.end_us) == (True, 1, 119709.078979, None)
    # the trace's clock is tied to the GPU's by the kernel channel event
    assert list(t.offset_us) == [225798]
    assert abs(t.offset_us[225798] - (1756135989724672.0 - 119711.888)) < 1
    (r,) = t.ops(nranks=8).records()
    assert r.comm == CommKey(1493613951195738943, 0, 8, 0, None)
    assert (r.pid, r.op, r.sn, r.msg_bytes, r.exec_us) == (225798, "all_reduce", 0, 262144 * 4,
                                                           8159)
    assert (r.start_us, r.kernel_start_us, r.kernel_stop_us) == (
        1756135989716954, 1756135989724672, 1756135989732831)


# ----- CoMMA ---------------------------------------------------------------------------------
def test_comma_latency_record():
    problems = Problems()
    c = read_comma_file(fixture("comma_latency_record.json"), problems)
    assert problems.counts["relative_time"] == 1 and not c.epoch
    (call,) = c.calls
    assert (call.comm, call.rank, call.op, call.sn, call.nbytes) == (
        0x58AECEBABB9E37AF, 0, "all_reduce", 57, 20971520)
    assert (call.ts_us, call.dur_us, call.exec_us) == (9615369.0, 11039.0, 1456.0)
    recv, send = call.proxyops
    assert (recv.peer, recv.send, recv.n_steps, recv.chunk, recv.pid, recv.ts_us,
            recv.dur_us) == (16, False, 2, 1048576, 169, 9624951.0, 1379.0)
    assert recv.steps == ((1, 1048576, 9624952.0, 9626229.0), (2, 262144, 9624953.0, 9626229.0))
    assert (send.send, send.ts_us, send.dur_us) == (True, 9625026.0, 1382.0)
    assert recv.nbytes == send.nbytes == 1048576 + 262144
    (r,) = c.ops(host="h", nranks=32).records()
    assert r.comm == CommKey(0x58AECEBABB9E37AF, 0, 32, 0, None)
    assert (r.pid, r.sn, r.msg_bytes, r.exec_us, r.start_us, r.kernel_stop_us) == (
        169, 57, 20971520, 1456, 9615369, 9626408)


# ----- job logs -----------------------------------------------------------------------------
def test_nccl_info_net_ib_names_the_nics():
    (net,) = read_logs([fixture("nccl_debug_info_net_ib.log")]).net
    assert (net.where.host, net.where.pid, net.where.cuda_dev, net.where.line) == (
        "node-2", 5776, 0, 1)
    assert net.devices == ((0, "ibP111p0s0", 1, "IB"), (1, "rdmaP1111p0s2", 1, "RoCE"))
    assert net.nics == ("ibP111p0s0", "rdmaP1111p0s2")
    assert (net.oob_if, net.oob_ip) == ("eth0", "10.2.0.4")


def test_nccl_warn_ib_completion_across_a_wrapped_line():
    facts = read_logs([fixture("nccl_debug_warn_ib_completion.log")])
    (w,) = facts.warns
    assert (w.where.host, w.where.pid, w.where.cuda_dev) == ("node-2", 5776, 0)
    assert (w.file, w.file_line, w.kind) == ("transport/net_ib.cc", 1296, "ib_completion")
    assert (w.peer_addr, w.peer_port, w.status, w.status_name, w.vendor_err, w.direction) == (
        "10.2.0.5", 33092, 12, "RETRY_EXC_ERR", 129, "Recv")
    assert w.message.endswith("len 0, vendor err 129 (Recv)")    # the wrapped tail joined
    assert facts.errors_by_process == {("node-2", 5776): {6: 3}}   # three "-> 6" lines


def test_nccl_warn_socket_connect():
    (w,) = read_logs([fixture("nccl_debug_warn_socket_connect.log")]).warns
    assert (w.where.host, w.where.pid, w.where.cuda_dev) == ("r11i6n2", 486514, 1)
    assert (w.file, w.file_line, w.kind) == ("include/socket.h", 403, "socket_connect")
    assert (w.peer_addr, w.peer_port, w.status_name) == ("10.148.3.247", 56821,
                                                         "Connection refused")


def test_watchdog_timeout_and_status():
    facts = read_logs([fixture("watchdog_timeout.log")])
    (t,) = facts.timeouts
    assert (t.rank, t.pg_rank, t.seq, t.op, t.numel_in, t.numel_out, t.timeout_ms,
            t.ran_ms) == (368, 368, 5, "all_reduce", 1, 1, 600000, 600001)
    assert t.where.line == 1 and t.where.stamp == "808 04:21:41.160918398"
    (s,) = facts.statuses
    assert (s.rank, s.pg_id, s.pg_desc, s.pg_rank, s.seq, s.last_enqueued,
            s.last_completed) == (368, "0", "default_pg", 368, 5, 5, 4)
    assert s.where.line == 2


def test_watchdog_desync_report_names_the_lagging_rank():
    facts = read_logs([fixture("watchdog_timeout_desync_report.log")])
    (t,) = facts.timeouts
    assert (t.rank, t.pg_rank, t.seq, t.op, t.timeout_ms, t.ran_ms) == (
        None, 0, 2, "all_reduce", 8000, 8097)
    (d,) = facts.desyncs
    assert (d.pg_rank, d.op, d.seq, d.where.line) == (0, "all_reduce", 3, 2)
    assert d.culprits == ((1, "finished collective #2, but didn't join collective #3 "
                              "(count from 1)"),)
    assert facts.lines == 8


def test_nccl_info_net_socket_names_the_interfaces(tmp_path):
    # the first line as NCCL 2.28.9 printed it on the GPU machine (tests/gpu: its socket
    # transport over loopback); the second as net_socket.cc writes several interfaces, one IPv6
    log = tmp_path / "nccl.log"
    log.write_text("vm:709:709 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
                   "node-7:41:41 [3] NCCL INFO NET/Socket : Using [0]eth0:10.2.0.7<0> "
                   "[1]eth1:fe80::a00:27ff:fe4e:66a1%eth1<0>\n")
    one, two = read_logs([log]).net
    assert (one.where.host, one.where.pid, one.nics, one.oob_if, one.oob_ip) == (
        "vm", 709, ("lo",), "lo", "127.0.0.1")
    assert two.devices == ((0, "eth0", 0, "Socket"), (1, "eth1", 0, "Socket"))
    assert (two.where.cuda_dev, two.oob_if, two.oob_ip) == (3, "eth0", "10.2.0.7")
