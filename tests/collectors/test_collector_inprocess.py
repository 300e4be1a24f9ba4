"""The collector inside this test process, on a real 1-rank gloo group and real Unix sockets:
reconnection, a sidecar that stops reading, pass-through of torch's own errors, uninstall."""

from __future__ import annotations

import socket
import time

import pytest
from collector_testkit import FrameSink, wait_for

import collectors
from collectors.config import CollectorConfig

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.network



@pytest.fixture
def collector(request, tmp_path, one_rank_group):
    cfg = CollectorConfig(socket_path=tmp_path / "sidecar.sock", job="inproc", host="h0",
                          flush_interval_s=0.05, send_timeout_s=0.3, reconnect_max_s=0.1,
                          exit_flush_s=0.5, buffer_rows=getattr(request, "param", 65536))
    coll = collectors.install(cfg)
    yield coll
    collectors.uninstall()


def _bodies(sink: FrameSink, cid: int) -> list[str]:
    return [m.WhichOneof("body") for c, m in list(sink.frames) if c == cid]


def test_late_sidecar_gets_buffered_rows_and_a_restarted_one_hears_rank_and_groups_again(
        collector, tmp_path):
    t = torch.ones(4)
    for _ in range(5):
        dist.all_reduce(t)  # nobody listens yet: rows wait in the buffer
    sink = FrameSink(collector.config.socket_path)
    try:
        wait_for(lambda: len(sink.op_rows()) == 5, 10, "the buffered rows")
        assert _bodies(sink, 1)[:2] == ["rank", "group"]
        assert sorted(r["seq"] for r in sink.op_rows()) == list(range(5))
    finally:
        sink.close()
    # The sidecar restarts: drop its connection, listen again on the same path.
    collector.config.socket_path.unlink()
    time.sleep(0.2)  # lets the collector notice while nobody listens (not a wait for a result)
    dist.all_reduce(t)
    sink2 = FrameSink(collector.config.socket_path)
    try:
        for _ in range(3):
            dist.all_reduce(t)
        # Row 5 was sent into the closed connection, failed, and is resent on the new one.
        wait_for(lambda: len(sink2.op_rows()) >= 4, 10, "the rows made after the restart")
        assert sorted(r["seq"] for r in sink2.op_rows()) == [5, 6, 7, 8]
        bodies = _bodies(sink2, 1)
        assert bodies[:2] == ["rank", "group"]
        assert bodies.index("ops") > bodies.index("group")
        (group,) = sink2.of_kind("group")
        assert (group.group.pg, list(group.group.ranks)) == (dist.group.WORLD.group_name, [0])
    finally:
        sink2.close()


@pytest.mark.parametrize("collector", [2000], indirect=True)
def test_a_sidecar_that_stops_reading_never_blocks_the_caller(collector, tmp_path):
    # A peer that accepts and never reads: the socket buffer fills, sends time out, rows go
    # back to the buffer, the buffer fills and the hooks drop (and count) the rest.
    path = collector.config.socket_path
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        t = torch.ones(1)
        n = 30000
        for _ in range(n):
            dist.all_reduce(t)
        c = collectors.stats()
        assert c.recorded == n
        # at most 2000 rows buffered and one frame (8192 rows) in the shipper's hands
        assert c.dropped >= n - 2000 - 8192 - c.shipped > 0
    finally:
        server.close()


def _raised(fn, *args, **kwargs) -> tuple[type, str]:
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return type(exc), str(exc)
    raise AssertionError("expected an exception")


def test_torch_errors_pass_through_unchanged(collector):
    hooked = dist.all_reduce
    orig = hooked.__c4_original__
    # Bad arguments, including ones the recorder itself cannot digest (an unhashable group):
    # the program sees exactly the exception torch raises without the collector.
    for args, kwargs in ((("not a tensor",), {}), ((torch.ones(1),), {"group": [0]})):
        assert _raised(hooked, *args, **kwargs) == _raised(orig, *args, **kwargs)
    dist.P2POp(dist.isend, torch.ones(1), 0)  # torch's own check accepts the hooked isend
    # A call that gloo rejects is recorded as an error and still raises.
    with pytest.raises(RuntimeError, match="invalid root rank"):
        dist.broadcast(torch.ones(1), src=3)
    assert collectors.stats().recorded >= 1


def test_an_op_without_futures_does_not_switch_the_others_to_wait_timing(collector):
    collector.recorder.done.mode = "future"
    waiting = collector.recorder.done._waiting
    work = dist.reduce_scatter_single(torch.empty(2), torch.ones(2), async_op=True)
    assert list(waiting) == [id(work)]  # gloo: no future for reduce_scatter, timed at wait()
    other = dist.all_reduce(torch.ones(2), async_op=True)
    assert list(waiting) == [id(work)]  # all_reduce still completes through its future
    work.wait()
    other.wait()
    assert not waiting
    wait_for(lambda: collectors.stats().recorded == 2, 5, "both completions")


def test_poll_timing_sees_completion_before_the_program_waits(collector):
    sink = FrameSink(collector.config.socket_path)
    try:
        collector.recorder.done.mode = "poll"
        work = dist.all_reduce(torch.ones(4), async_op=True)
        # Nobody waits: the shipper's poll sees the Work complete and ships the row.
        wait_for(lambda: len(sink.op_rows()) == 1, 10, "the row of the unwaited call")
        time.sleep(0.3)  # the program computes on before it waits
        t_wait = time.time_ns()
        work.wait()
        (row,) = sink.op_rows()
        assert row["t_enter_ns"] <= row["t_end_ns"] < t_wait
        # The program's own is_completed() and get_future() are observation points too.
        work = dist.all_reduce(torch.ones(4), async_op=True)
        wait_for(work.is_completed, 10, "the Work to complete")
        fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
        fut.wait()
        assert not collector.recorder.done._waiting
        wait_for(lambda: len(sink.op_rows()) == 3, 10, "three rows")
        rows = sink.op_rows()
        assert sorted(r["seq"] for r in rows) == [0, 1, 2]
        assert all(r["t_end_ns"] >= r["t_enter_ns"] and r["status"] == 0 for r in rows)
    finally:
        sink.close()


def test_auto_timing_polls_only_while_async_calls_are_frequent(collector):
    done = collector.recorder.done
    assert done.mode == "auto" and done.future_timing  # few calls yet: exact callbacks
    t = torch.ones(1)
    made = 0
    deadline = time.monotonic() + 20
    while done.future_timing:  # thousands of async calls per second: switch to polling
        assert time.monotonic() < deadline, "auto timing never switched to polling"
        for _ in range(200):
            dist.all_reduce(t, async_op=True).wait()
        made += 200
    unwaited = dist.all_reduce(t, async_op=True)  # completed by the shipper's poll
    made += 1
    wait_for(lambda: done.future_timing, 10, "callbacks again once the calls stop")
    assert not done._waiting
    unwaited.wait()
    wait_for(lambda: collectors.stats().recorded == made, 10, "every call recorded once")


def test_a_forked_child_starts_with_an_empty_buffer_and_no_shipper(collector):
    import os

    dist.all_reduce(torch.ones(1))
    assert collector.shipper is not None
    pid = os.fork()
    if pid == 0:  # the child: check and leave at once, without running any exit handler
        ok = collector.shipper is None and not collector.buffer.rows
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_sigterm_watch_is_armed_once_shipping_and_not_inherited_by_a_forked_child(collector):
    import os
    import signal

    dist.all_reduce(torch.ones(1))
    watch = collector.term_watch
    assert watch is not None and watch.armed
    assert signal.getsignal(signal.SIGTERM) is watch._handler
    pid = os.fork()
    if pid == 0:  # the child: SIGTERM and the wakeup fd are the program's again; die of it
        ok = (signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
              and signal.set_wakeup_fd(-1) == -1 and collector.term_watch is None)
        if ok:
            os.kill(os.getpid(), signal.SIGTERM)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGTERM
    # The child's signal reached neither our watcher nor this process.
    assert watch.armed and not watch._running
    dist.all_reduce(torch.ones(1))
    collectors.uninstall()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.set_wakeup_fd(-1) == -1
    wait_for(lambda: not watch._thread.is_alive(), 5, "the watcher to end")


def test_a_wakeup_fd_the_program_had_set_still_hears_its_signals(one_rank_group, tmp_path):
    import contextlib
    import os
    import signal

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    os.set_blocking(read_fd, False)
    old_handler = signal.signal(signal.SIGUSR1, lambda *_: None)
    previous = signal.set_wakeup_fd(write_fd)
    try:
        coll = collectors.install(socket_path=tmp_path / "s.sock")
        dist.all_reduce(torch.ones(1))  # starts shipping: the SIGTERM watch takes the fd over
        current = signal.set_wakeup_fd(-1)  # (the only way to read it)
        signal.set_wakeup_fd(current, warn_on_full_buffer=False)
        assert coll.term_watch is not None and current == coll.term_watch._write_fd
        os.kill(os.getpid(), signal.SIGUSR1)
        got = bytearray()

        def forwarded() -> bool:
            with contextlib.suppress(BlockingIOError):
                got.extend(os.read(read_fd, 16))
            return signal.SIGUSR1 in got

        wait_for(forwarded, 5, "SIGUSR1's byte on the program's own wakeup fd")
        collectors.uninstall()
        assert signal.set_wakeup_fd(previous) == write_fd  # given back
    finally:
        collectors.uninstall()
        signal.signal(signal.SIGUSR1, old_handler)
        os.close(read_fd)
        os.close(write_fd)


def test_uninstall_restores_torch(one_rank_group, tmp_path):
    originals = (dist.all_reduce, dist.isend, dist.Work.wait, dist.batch_isend_irecv)
    coll = collectors.install(socket_path=tmp_path / "s.sock")
    assert collectors.install() is coll  # idempotent
    assert dist.all_reduce is not originals[0]
    assert dist.all_reduce.__name__ == "all_reduce"
    collectors.uninstall()
    assert (dist.all_reduce, dist.isend, dist.Work.wait, dist.batch_isend_irecv) == originals
    assert collectors.current() is None


def test_the_rank_announces_the_gpu_it_drives(collector, monkeypatch):
    # what torchrun gives the second local rank of a job on GPUs 4 and 6 (no GPU here: the
    # device comes from the list at the local rank)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    info = collector._rank_info()
    assert (info.local_rank, info.cuda_device, info.host) == (1, "6", "h0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    expected = "1" if torch.cuda.is_available() else ""
    assert collector._rank_info().cuda_device == expected
