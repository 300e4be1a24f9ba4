"""IB sysfs tree, perfquery, ibdiagnet PM and OpenSM unhealthy ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.health.errors import HealthParseError
from collectors.health.infiniband import (
    parse_ibdiagnet_pm,
    parse_opensm_unhealthy,
    parse_perfquery,
    read_ib_sysfs,
)
from tests.collectors.health.fixtures import health, text


def test_sysfs_tree_without_trailing_newlines() -> None:
    ports = read_ib_sysfs(health("sysfs_class_infiniband_h100"))
    assert [p.name for p in ports] == ["mlx5_0/1", "mlx5_1/1", "mlx5_bond_0/1"]
    p0, p1, bond = ports
    assert (p0.state, p0.phys_state, p0.rate_gbps, p0.link_layer) == ("ACTIVE", "LinkUp", 400,
                                                                      "InfiniBand")
    assert p0.up and p0.hca_type == "MT4129" and p0.fw_ver == "28.41.1000"
    assert p0.counters["port_rcv_errors"] == 14
    assert p0.counters["excessive_buffer_overrun_errors"] == 15
    assert p0.counters["port_xmit_data"] == 230442669431839  # octets / 4, kept as read
    assert p1.counters["link_downed"] == 255 and p1.counters["port_rcv_switch_relay_errors"] == 2
    assert p0.hw_counters["roce_adp_retrans"] == 3 and "lifespan" not in p0.hw_counters
    assert (bond.link_layer, bond.rate_gbps, bond.hca_type) == ("Ethernet", 200, "MT41692")
    assert len(p0.counters) == 21 and len(p0.hw_counters) == 25


def test_sysfs_garbled_counter(tmp_path: Path) -> None:
    (tmp_path / "mlx5_0/ports/1/counters").mkdir(parents=True)
    (tmp_path / "mlx5_0/ports/1/state").write_text("1: DOWN\n")
    (tmp_path / "mlx5_0/ports/1/counters/symbol_error").write_text("lots\n")
    with pytest.raises(HealthParseError, match=r"symbol_error.*'lots' is not an integer"):
        read_ib_sysfs(tmp_path)
    assert read_ib_sysfs(tmp_path / "absent") == []


def test_perfquery_extended_two_ports() -> None:
    b1, b2 = parse_perfquery(text("perfquery_extended_switch_2ports_edr.txt"))
    assert (b1.title, b1.lid, b1.port) == ("Port extended counters", 1719, 1)
    assert b1.counters["PortXmitData"] == 36298026860928 and b1.counters["PortXmitWait"] == 22730501
    assert b1.counters["SymbolErrorCounter"] == 0 and b1.counters["CounterSelect2"] == 0
    assert b2.port == 2 and b2.counters["PortRcvData"] == 39078804993378
    [d] = parse_perfquery(text("perfquery_rcv_error_details_switch_port1.txt"))
    assert d.title == "PortRcvErrorDetails counters" and d.counters["PortLoopingErrors"] == 0


def test_ibdiagnet_pm_hex_counters() -> None:
    [p] = parse_ibdiagnet_pm(text("ibdiagnet_pm_port_counters_gcm_anonymized.txt"))
    assert (p.port, p.lid, p.guid) == (2, 0x0599, "0x0011223344550001")
    assert p.counters == {"symbol_error_counter_extended": 255,
                          "link_error_recovery_counter_extended": 10,
                          "port_rcv_errors_extended": 0}


def test_opensm_unhealthy_both_ends() -> None:
    rows = parse_opensm_unhealthy(text("opensm_unhealthy_ports_gcm_anonymized.txt"))
    assert len(rows) == 4 and all(r.conditions == ("FLAPPING",) for r in rows)
    assert (rows[0].node, rows[0].port, rows[0].peer_node) == ("spine-sw-03", 25, "leaf-sw-38")
    assert rows[0].time == "Fri Mar 20 01:13:40 2026"
    with pytest.raises(HealthParseError, match="u:1"):
        parse_opensm_unhealthy("nonsense\n", "u")
