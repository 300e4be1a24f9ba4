"""A rank stopped by SIGTERM (how launchers stop jobs) still ships what it recorded, then dies
of the signal as it would have without c4."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import textwrap

import pytest

from tests.collectors.collector_testkit import FrameSink, launch_ranks, wait_for

pytestmark = [pytest.mark.multiprocess]

SCRIPT = textwrap.dedent("""
    import sys, time
    import collectors
    collectors.install()
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(8)
    for _ in range(int(sys.argv[1])):
        dist.all_reduce(t)
    print("ready", flush=True)
    time.sleep(600)
""")


def test_sigterm_flushes_then_dies_of_the_signal(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    sink = FrameSink(tmp_path / "sidecar.sock")
    # A long flush interval: without the SIGTERM flush the records would still be buffered.
    (proc,) = launch_ranks(script, 1, {"C4_SIDECAR_SOCKET": str(sink.path),
                                       "C4_FLUSH_INTERVAL": "30"}, ["37"])
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == -signal.SIGTERM
        wait_for(lambda: len(sink.op_rows()) >= 37, 10, "the 37 all_reduce rows")
        assert sorted(r["seq"] for r in sink.op_rows() if r["op"] == "all_reduce") == \
            list(range(37))
    finally:
        if proc.poll() is None:
            proc.kill()
        sink.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
