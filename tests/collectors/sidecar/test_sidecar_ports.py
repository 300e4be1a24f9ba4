"""NIC ports from sysfs: the InfiniBand parser on a recorded H100 node's tree, and a fake tree
whose port goes down (a record then, none while nothing changes)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from collectors.sidecar.ports import (
    PortMapError,
    PortWatch,
    ib_state_up,
    parse_nic_map,
    read_infiniband,
    read_net,
)

FIXTURE = Path("shared") / "fixtures" / "health" / "sysfs_class_infiniband_h100"
S = 1_000_000_000


def _fixture() -> Path:
    """The recorded tree, in the ``shared`` directory beside the checkout (or a level up, for a
    worktree), or under ``C4_SHARED_DIR``."""
    here = Path(__file__).resolve()
    cands = [Path(os.environ["C4_SHARED_DIR"]) / FIXTURE.relative_to("shared")] \
        if os.environ.get("C4_SHARED_DIR") else []
    cands += [parent / FIXTURE for parent in here.parents]
    for cand in cands:
        if cand.is_dir():
            return cand
    pytest.skip("the recorded sysfs fixture (shared/fixtures/health) is not here; set "
                "C4_SHARED_DIR to the shared directory")


def test_recorded_h100_infiniband_tree():
    ports = {p.port: p for p in read_infiniband(_fixture())}
    assert sorted(ports) == ["mlx5_0/1", "mlx5_1/1", "mlx5_bond_0/1"]
    assert all(p.up for p in ports.values())      # "4: ACTIVE"
    ib0, ib1 = ports["mlx5_0/1"].counters, ports["mlx5_1/1"].counters
    assert ib0["link_downed"] == 0 and ib1["link_downed"] == 255
    assert ib0["rcv_errors"] == 14 and ib0["symbol_errors"] == 0
    assert ib0["xmit_discards"] == 0
    # port_xmit_data counts octets / 4
    assert ib0["tx_bytes"] == 4 * 230442669431839
    assert ib1["rx_bytes"] == 4 * 205128687774249
    # retransmissions: local_ack_timeout_err + packet_seq_err + roce_adp_retrans
    assert ib0["retrans"] == 3


@pytest.mark.parametrize("text, up", [("4: ACTIVE", True), ("5: ACTIVE_DEFER", True),
                                      ("1: DOWN", False), ("2: INIT", False),
                                      ("3: ARMED", False)])
def test_ib_states(text, up):
    assert ib_state_up(text) is up


def _fake_sys(root: Path) -> Path:
    """A netdev eth0 (up) and lo, and an InfiniBand port copied from the recorded tree."""
    net = root / "class" / "net"
    for name, state in (("eth0", "up"), ("lo", "unknown")):
        (net / name / "statistics").mkdir(parents=True)
        (net / name / "operstate").write_text(state + "\n")
        for c in ("rx_bytes", "tx_bytes", "rx_errors", "tx_dropped", "rx_crc_errors"):
            (net / name / "statistics" / c).write_text("0\n")
        (net / name / "carrier_down_count").write_text("0\n")
    ib = root / "class" / "infiniband"
    ib.mkdir(parents=True)
    shutil.copytree(_fixture() / "mlx5_0", ib / "mlx5_0")
    return root


def test_watch_sends_changes_only_and_maps_nics(tmp_path):
    root = _fake_sys(tmp_path)
    clock = [100 * S]
    watch = PortWatch("node3", sysfs_root=root, heartbeat_s=30,
                      nic_map=parse_nic_map("eth0=node3/nic0, mlx5_0/1=node3/nic1"),
                      clock=lambda: clock[0])
    first = watch.poll()
    nics = [first.strings[i] for i in first["nic"].tolist()]
    assert sorted(nics) == ["node3/nic0", "node3/nic1"]           # lo is not mapped
    assert {first.strings[i] for i in first["host"].tolist()} == {"node3"}
    assert first["up"].tolist() == [1, 1]
    clock[0] += S
    (root / "class/net/eth0/statistics/rx_bytes").write_text("123456\n")
    assert len(watch.poll()) == 0          # bytes alone: no record before the heartbeat
    clock[0] += S
    (root / "class/net/eth0/operstate").write_text("down\n")
    down = watch.poll()
    assert [down.strings[i] for i in down["nic"].tolist()] == ["node3/nic0"]
    assert down["up"].tolist() == [0] and down["rx_bytes"].tolist() == [123456]
    clock[0] += S
    (root / "class/infiniband/mlx5_0/ports/1/counters/symbol_error").write_text("7")
    errs = watch.poll()
    assert [errs.strings[i] for i in errs["nic"].tolist()] == ["node3/nic1"]
    assert errs["symbol_errors"].tolist() == [7]
    clock[0] += 31 * S
    assert len(watch.poll()) == 2          # the heartbeat: still watched
    assert len(watch.current()) == 2


def test_the_ports_of_a_nic_cabled_to_two_switches_make_one_record(tmp_path):
    root = _fake_sys(tmp_path)
    ports = root / "class/infiniband/mlx5_0/ports"
    shutil.copytree(ports / "1", ports / "2")
    clock = [100 * S]
    # (and its interface, as discovery maps it: the same port again, not counted twice)
    watch = PortWatch("node3", sysfs_root=root, clock=lambda: clock[0],
                      nic_map=parse_nic_map("mlx5_0/1=node3/nic1,mlx5_0/2=node3/nic1,"
                                            "eth0=node3/nic1"))
    first = watch.poll()
    assert [first.strings[i] for i in first["nic"].tolist()] == ["node3/nic1"]
    assert first["up"].tolist() == [1] and first["retrans"].tolist() == [6]
    # one port lost: the NIC stays up, and says so by its counter
    clock[0] += S
    (ports / "2/state").write_text("1: DOWN\n")
    (ports / "2/counters/link_downed").write_text("1\n")
    lost = watch.poll()
    assert lost["up"].tolist() == [1] and lost["link_downed"].tolist() == [1]
    # both lost: the NIC is down
    clock[0] += S
    (ports / "1/state").write_text("1: DOWN\n")
    (ports / "1/counters/link_downed").write_text("1\n")
    down = watch.poll()
    assert down["up"].tolist() == [0] and down["link_downed"].tolist() == [2]


def test_unmapped_ports_are_named_after_the_host(tmp_path):
    root = _fake_sys(tmp_path)
    assert len(PortWatch("node9", sysfs_root=root).poll()) == 0, "nothing maps to the topology"
    got = PortWatch("node9", sysfs_root=root, all_ports=True,
                    nic_map={"eth0": "node9/nic0"}).poll()
    assert sorted(got.strings[i] for i in got["nic"].tolist()) == \
        ["node9/mlx5_0/1", "node9/nic0"]
    assert [p.port for p in read_net(root / "class" / "net")] == ["eth0"]


def test_a_bad_nic_map_says_what_it_wants():
    with pytest.raises(PortMapError, match="is not PORT=NIC"):
        parse_nic_map("eth0")
