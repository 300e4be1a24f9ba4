"""A full spill disk degrades the sidecar to counted drops, and it recovers by itself once the
daemon acknowledges what the log holds: no stray files, a clean exit. The spill directory is a
1 MiB tmpfs; the sidecar and the daemon are real processes."""

from __future__ import annotations

import os

import pytest

from diagnosis.client import DaemonClient
from tests.collectors.sidecar.harness import AckedRank, Car, stored_keys
from tests.support.mounts import tmpfs
from tests.support.services import free_port, start_daemon, wait_for

SENT = 200_000

pytestmark = [pytest.mark.network, pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0, reason="mounts a small tmpfs for the spill directory (needs root)")]


def test_full_disk_drops_counted_then_recovers_by_itself(tmp_path):
    port = free_port()
    with tmpfs(tmp_path / "spill", "1m") as spill:
        car = Car(tmp_path, port, spill=spill).start()  # no daemon yet: everything stays
        daemon = None
        rank = AckedRank(car.sock, "full", 0, 1)
        try:
            # ~12 MB of records (~2.5 MB compressed, as they are logged while the daemon is
            # away) into a 1 MiB disk
            for seq in range(0, SENT, 500):
                rank.send_ops(range(seq, seq + 500))
            rank.settle()  # every frame settled: logged, or dropped and counted
            dropped = car.dropped()
            assert set(dropped) == {"disk_full"}, dropped
            assert 0 < dropped["disk_full"] < SENT
            assert not [p.name for p in spill.iterdir() if p.name.endswith(".tmp")]
            assert car.service is not None and car.service.running()

            daemon = start_daemon(tmp_path, port)
            with DaemonClient(f"127.0.0.1:{port}") as client:
                # exact accounting: what was not dropped (and counted) is stored
                wait_for(lambda: len(client.ops("full")) == SENT - dropped["disk_full"], 60,
                         what="everything the log held")
                wait_for(lambda: car.metric("c4_sidecar_spill_bytes") < 512 << 10, 30,
                         what="the log to shrink as the daemon acknowledges")
                # and `c4 status` shows the drops (records, every reason)
                wait_for(lambda: [s.stats.dropped for s in client.status().sidecars
                                  if s.stats.host] == [dropped["disk_full"]], 10,
                         what="the drops in the daemon's status")
                # space is back: new records are taken and delivered, none dropped
                for seq in range(SENT, SENT + 10_000, 500):
                    rank.send_ops(range(seq, seq + 500))
                rank.settle()
                wait_for(lambda: sum(1 for _, s in stored_keys(client, "full") if s >= SENT)
                         == 10_000, 30, what="records sent after the disk had room again")
            assert car.dropped() == dropped
            rank.close()
            assert car.stop() == 0, car.output()[-2000:]
            assert not [p.name for p in spill.iterdir() if p.name.endswith(".tmp")]
        finally:
            rank.close()
            car.stop()
            if daemon is not None:
                daemon.stop()
