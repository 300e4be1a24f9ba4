"""RDMA port counters read from a sysfs tree built here.

THE REAL-HARDWARE PATH IS UNTESTED: the machine these tests were written on has no RDMA device,
so they run on a directory tree that copies the real layout (class/infiniband/<dev> links into
devices/, ports/<n>/counters and hw_counters, "<n>: <NAME>" state files) and value formats
(one decimal integer and a newline per counter file).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from c4.proto import codec
from collectors.linkstats import LinkSampler
from collectors.linkstats.rdma import (
    WORD_BYTES,
    PortSampler,
    list_ports,
    parse_port,
    sample_ports,
    to_columns,
)

# The file names of an mlx5 port's counters/ directory (IB PMA counters).
PMA_COUNTERS = {
    "VL15_dropped": 0, "excessive_buffer_overrun_errors": 0, "link_downed": 1,
    "link_error_recovery": 2, "local_link_integrity_errors": 0, "multicast_rcv_packets": 10,
    "multicast_xmit_packets": 11, "port_rcv_constraint_errors": 0, "port_rcv_data": 250_000,
    "port_rcv_errors": 0, "port_rcv_packets": 1200, "port_rcv_remote_physical_errors": 0,
    "port_rcv_switch_relay_errors": 0, "port_xmit_constraint_errors": 0,
    "port_xmit_data": 1_000_000, "port_xmit_discards": 3, "port_xmit_packets": 5000,
    "port_xmit_wait": 777, "symbol_error": 4, "unicast_rcv_packets": 1190,
    "unicast_xmit_packets": 4989,
}
# A subset of mlx5 hw_counters file names.
HW_COUNTERS = {
    "duplicate_request": 0, "implied_nak_seq_err": 2, "lifespan": 10,
    "local_ack_timeout_err": 5, "np_cnp_sent": 40, "np_ecn_marked_roce_packets": 41,
    "out_of_buffer": 0, "out_of_sequence": 6, "packet_seq_err": 7, "rnr_nak_retry_err": 0,
    "rp_cnp_handled": 39, "rx_read_requests": 100, "rx_write_requests": 200,
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_device(root: Path, pci: str, dev: str, link_layer: str, hw: bool) -> Path:
    """Create devices/.../infiniband/<dev> and its class/infiniband/<dev> link, as sysfs has."""
    real = root / "devices" / "pci0000:00" / "0000:00:02.0" / pci / "infiniband" / dev
    port = real / "ports" / "1"
    for name, value in PMA_COUNTERS.items():
        _write(port / "counters" / name, f"{value}\n")
    if hw:
        for name, value in HW_COUNTERS.items():
            _write(port / "hw_counters" / name, f"{value}\n")
    _write(port / "state", "4: ACTIVE\n")
    _write(port / "phys_state", "5: LinkUp\n")
    _write(port / "rate", "100 Gb/sec (4X EDR)\n")
    _write(port / "link_layer", f"{link_layer}\n")
    _write(real / "node_type", "1: CA\n")
    cls = root / "class" / "infiniband"
    cls.mkdir(parents=True, exist_ok=True)
    (cls / dev).symlink_to(os.path.relpath(real, cls))
    return port


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    make_device(tmp_path, "0000:03:00.0", "mlx5_0", "InfiniBand", hw=False)
    roce = make_device(tmp_path, "0000:04:00.0", "mlx5_1", "Ethernet", hw=True)
    # A counter that cannot be read is left out, not reported as 0.
    (roce / "counters" / "port_rcv_errors").write_text("garbage\n")
    (roce / "hw_counters" / "broken").mkdir()
    return tmp_path


def test_ports_and_counters(sysfs: Path) -> None:
    assert list_ports(str(sysfs)) == [("mlx5_0", 1), ("mlx5_1", 1)]
    ib, roce = sample_ports(sysfs_root=str(sysfs), clock=lambda: 123)
    assert (ib.name, ib.state, ib.link_layer, ib.t_ns) == ("mlx5_0/1", "ACTIVE", "InfiniBand", 123)
    assert ib.xmit_bytes == 1_000_000 * WORD_BYTES
    assert ib.rcv_bytes == 250_000 * WORD_BYTES
    assert ib.counters == PMA_COUNTERS
    assert ib.retrans == 0  # no hw_counters on this one
    assert roce.link_layer == "Ethernet"
    assert roce.counters["port_xmit_wait"] == 777 and roce.counters["np_cnp_sent"] == 40
    assert "port_rcv_errors" not in roce.counters and "broken" not in roce.counters
    assert roce.retrans == 5 + 7 + 2


def test_missing_sysfs_and_ports(tmp_path: Path) -> None:
    assert list_ports(str(tmp_path)) == []
    assert sample_ports(sysfs_root=str(tmp_path)) == []
    assert sample_ports([("mlx5_9", 1)], sysfs_root=str(tmp_path)) == []


def test_rate_between_samples(sysfs: Path) -> None:
    now = [1_000_000_000]
    sampler = PortSampler(sysfs_root=str(sysfs), clock=lambda: now[0])
    _, rates = sampler.sample([("mlx5_0", 1)])
    assert rates == [0]  # nothing to compare with yet
    counter = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    (counter / "port_xmit_data").write_text(f"{1_000_000 + 2_500_000}\n")
    now[0] += 2_000_000_000
    samples, rates = sampler.sample([("mlx5_0", 1)])
    assert rates == [2_500_000 * WORD_BYTES // 2]
    cols = to_columns(samples, {"mlx5_0/1": 3}, rates)
    assert list(cols.names("local")) == ["rdma:mlx5_0/1"]
    assert list(cols.names("remote")) == [""]
    assert int(cols["delivery_rate"][0]) == 5_000_000


def test_link_sampler_reports_each_port_once(sysfs: Path) -> None:
    sampler = LinkSampler(
        rdma_ports={0: "mlx5_0/1", 1: "mlx5_0/1", 2: "mlx5_1"}, sysfs_root=str(sysfs)
    )
    cols = codec.decode_conns(codec.encode_conns("job", sampler.sample()))
    assert sorted(zip(cols["rank"].tolist(), cols.names("local"), strict=True)) == [
        (0, "rdma:mlx5_0/1"), (2, "rdma:mlx5_1/1")
    ]
    assert sorted(cols["bytes_acked"].tolist()) == [4_000_000, 4_000_000]
    # The sidecar refreshes the ranks' pids before each sample; that keeps the ports.
    sampler.set_ranks({})
    assert len(sampler.sample()) == 2


def test_parse_port() -> None:
    assert parse_port("mlx5_0/2") == ("mlx5_0", 2)
    assert parse_port("mlx5_0") == ("mlx5_0", 1)
    with pytest.raises(ValueError, match="DEVICE/PORT"):
        parse_port("mlx5_0/x")
