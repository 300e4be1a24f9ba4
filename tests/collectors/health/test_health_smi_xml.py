"""nvidia-smi -q -x on DTD v11, v12 and v13: the values each sample shows."""

from __future__ import annotations

import pytest

from collectors.health.errors import HealthParseError
from collectors.health.smi_xml import parse_smi_xml
from tests.collectors.health.fixtures import health


def _one(name: str):
    [g] = parse_smi_xml(health(name).read_bytes(), name)
    return g


def test_v11_tesla_t4_throttle_reasons_and_retired_pages() -> None:
    g = _one("nvidia_smi_q_x_tesla_t4_driver515_v11.xml")
    assert (g.bus_id, g.name, g.index) == ("00000000:00:1E.0", "Tesla T4", 0)
    v = g.values
    assert (v["temp_c"], v["power_w"], v["power_limit_w"]) == (40, 26.78, 70)
    assert (v["sm_clock_mhz"], v["sm_clock_max_mhz"]) == (585, 1590)
    assert (v["pcie_gen"], v["pcie_width"], v["pcie_width_max"]) == (3, 8, 16)
    assert v["retired_sbe"] == 0 and v["retired_dbe"] == 0 and v["retired_pending"] == 0
    assert "remap_pending" not in v  # T4 has no row remapper
    assert g.reasons == frozenset()


def test_v11_a10g_remapped_rows_histogram() -> None:
    g = _one("nvidia_smi_q_x_a10g_driver515_v11_remapped_rows.xml")
    v = g.values
    assert v["remap_banks_max"] == 192 and v["remap_banks_none"] == 0
    assert v["remap_pending"] == 0 and v["remap_failure"] == 0
    assert (v["pcie_gen"], v["pcie_gen_max"], v["pcie_width"]) == (1, 4, 8)  # idle power saving
    assert g.reasons == {"idle"}  # clocks_throttle_reason_gpu_idle


def test_v12_a100_mig_remapped_rows_na() -> None:
    g = _one("nvidia_smi_q_x_a100_sxm4_mig_driver535_v12.xml")
    assert g.name == "NVIDIA A100-SXM4-80GB" and g.index == 1
    v = g.values
    assert (v["temp_c"], v["mem_temp_c"], v["power_w"]) == (27, 44, 67.03)
    assert (v["sm_clock_mhz"], v["sm_clock_max_mhz"]) == (1275, 1410)
    assert not any(k.startswith("remap_") for k in v)  # <remapped_rows>N/A</remapped_rows>
    assert v["ecc_sram_unc_vol"] == 0


def test_v13_rtx4000_tabs_event_counters_average_power() -> None:
    g = _one("nvidia_smi_q_x_rtx4000_sff_ada_driver595_v13.xml")
    v = g.values
    assert v["power_w"] == 8.81 and v["temp_c"] == 38
    assert v["event_us_sw_power_cap"] == 4251825415 and v["event_us_hw_thermal"] == 0
    assert v["remap_banks_max"] == 96
    assert "ecc_sram_unc_vol" not in v  # parity and SEC-DED both N/A (ECC off)
    assert "mem_temp_c" not in v
    assert g.reasons == {"idle"}


def test_not_nvidia_smi_xml() -> None:
    with pytest.raises(HealthParseError, match="expected <nvidia_smi_log>"):
        parse_smi_xml("<log/>", "f.xml")
    with pytest.raises(HealthParseError, match=r"f\.xml:1: not well-formed"):
        parse_smi_xml("<nvidia_smi_log><gpu>", "f.xml")
