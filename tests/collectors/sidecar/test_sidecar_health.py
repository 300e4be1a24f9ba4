"""Node health end to end with real processes: a sidecar started with --health reads a recorded
IB sysfs tree, PSI and a kernel log that grows, ships health records over gRPC, and the daemon
stores them and serves them back (c4 export writes them into the trace)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from c4.processes import c4_command
from c4.proto.health import HealthRecord
from diagnosis.client import DaemonClient
from tests.collectors.health.fixtures import health
from tests.support.paced import PacedJob
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for

pytestmark = [pytest.mark.network]


def _health(client: DaemonClient, job: str) -> list[HealthRecord]:
    return [HealthRecord.from_proto(s) for c in client.reduced(job)
            if c.WhichOneof("body") == "health" for s in c.health.samples]


def test_sidecar_ships_health_the_daemon_stores_it(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    (sysfs / "class").mkdir(parents=True)
    shutil.copytree(health("sysfs_class_infiniband_h100"), sysfs / "class" / "infiniband")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1,-;boot noise\n")
    port = free_port()
    daemon = start_daemon(tmp_path, port, extra=["--analyze-interval", "0.5"])
    car, sock = start_sidecar(tmp_path, port, "node0", extra=[
        "--health", "--health-interval", "0.3", "--health-gpu", "off", "--kmsg", str(kmsg),
        "--sysfs-root", str(sysfs), "--ports", "off", "--nic-map", "mlx5_1/1=node0/nic1"])
    job = PacedJob(sock, "hj", ranks=2, host="node0", pgs=("0",), rate=20).start()
    try:
        with DaemonClient(f"127.0.0.1:{port}") as client:
            first = wait_for(lambda: _health(client, "hj"), 40, what="health records stored")
            nic = next(r for r in first if r.component == "node0/nic1")
            assert nic.values["link_downed"] == 255 and nic.values["up"] == 1
            assert any(r.target == "node0" for r in first)   # the host's PSI / steal
            with kmsg.open("a") as fh:
                fh.write("3,2,2,-;NVRM: Xid (PCI:0000:9b:00): 79, pid=7, name=python, "
                         "GPU has fallen off the bus.\n")
            xid = wait_for(lambda: [r for r in _health(client, "hj") if r.event == "xid"], 30,
                           what="the XID as a health event")
            assert xid[0].code == 79 and xid[0].host == "node0"
            # hard evidence: a health report of its own, before any timing fault
            rep = wait_for(lambda: [r for r in client.faults("hj") if r.kind == "health"
                                    and r.evidence.get("xid") == 79], 30,
                           what="a health report for the XID")[0]
            assert rep.suspects[0].id == "node0" and "reboot" in rep.summary
            # then a rank stops: the hang report carries the XID on its host as a cause
            job.hang(1)
            hang = wait_for(lambda: [r for r in client.faults("hj")
                                     if r.kind.endswith("hang") and r.causes], 40,
                            what="a hang report with causes")[0]
            assert hang.causes[0]["kind"] == "xid" and hang.causes[0]["target"] == "node0"
        shown = subprocess.run(c4_command("faults", "show", hang.id, "--daemon",
                                          f"127.0.0.1:{port}"), capture_output=True,
                               text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "causes" in shown.stdout and "XID 79" in shown.stdout
    finally:
        job.close()
        car.stop()
        daemon.stop()
