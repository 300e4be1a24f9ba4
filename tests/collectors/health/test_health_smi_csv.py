"""nvidia-smi --query-gpu CSV, dmon and nvlink -s."""

from __future__ import annotations

import pytest

from collectors.health.errors import HealthParseError
from collectors.health.smi_csv import parse_dmon, parse_nvlink_status, parse_query_gpu_csv
from tests.collectors.health.fixtures import capture_section, text

H100_590 = "nvidia_smi_capture_h100_driver590_full.txt"


def test_clocks_event_reasons_columns_and_bitmask() -> None:
    gpus = parse_query_gpu_csv(text("nvidia_smi_query_gpu_clocks_event_reasons_rtxpro6000.csv"))
    assert [g.index for g in gpus] == [0, 1]
    assert all(g.reasons == {"sw_power_cap"} for g in gpus)  # 0x...4 and the Active column
    assert gpus[0].name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_ecc_power_units_in_header_and_values() -> None:
    g0, g1 = parse_query_gpu_csv(text("nvidia_smi_query_gpu_ecc_power_rtxpro6000.csv"))
    assert g0.values == {"temp_c": 25, "power_w": 30.39, "power_limit_w": 600,
                         "ecc_corr_vol_total": 0, "ecc_unc_vol_total": 0}
    assert g1.values["power_w"] == 28.54


def test_full_query_gpu_under_load_with_bracketed_sentinels() -> None:
    section = "load :: query-gpu (csv, what the exporter parses)"
    [g] = parse_query_gpu_csv(capture_section(H100_590, section))
    assert g.bus_id == "00000000:00:09.0"
    v = g.values
    assert (v["pcie_gen"], v["pcie_gen_max"]) == (5, 5)
    assert (v["pcie_width"], v["pcie_width_max"]) == (16, 16)
    assert v["event_us_hw_thermal"] == 0 and v["remap_pending"] == 0
    assert v["sm_clock_mhz"] == 1980 and v["util_pct"] == 100
    assert g.reasons == frozenset()  # active = 0x0 under load
    assert "temp_c" in v


def test_row_with_wrong_width_names_the_line() -> None:
    with pytest.raises(HealthParseError, match=r"q.csv:3: 1 values for 2"):
        parse_query_gpu_csv("index, temperature.gpu\n0, 30\n1\n", "q.csv")


def test_dmon_dash_is_absent() -> None:
    rows = parse_dmon(text("nvidia_smi_dmon_s_pt_rtxpro6000.txt"))
    assert len(rows) == 12 and [r.gpu for r in rows[:2]] == [0, 1]
    assert rows[0].values == {"pwr": 30, "gtemp": 25, "rxpci": 0, "txpci": 0}  # mtemp "-"
    assert rows[-1].values["pwr"] == 27 and rows[-1].values["rxpci"] == 1


def test_dmon_under_load_capture() -> None:
    section = "load :: dmon (per-device monitor, incl. PCIe rx/tx)"
    rows = parse_dmon(capture_section(H100_590, section))
    assert [r.values["pwr"] for r in rows] == [631, 634, 633, 634, 636]
    assert rows[0].values["pclk"] == 1980 and rows[0].values["mtemp"] == 57


def test_nvlink_status_tab_and_space_indent_and_elision() -> None:
    h800 = parse_nvlink_status(text("nvidia_smi_nvlink_status_h800_elided.txt"))
    assert [g.gpu for g in h800] == [0, 1, 7]  # the "..." line is skipped
    assert h800[0].links == {i: 26.562 for i in range(8)}
    a100 = parse_nvlink_status(text("nvidia_smi_nvlink_status_a100_8gpu.txt"))
    assert len(a100) == 8 and all(g.links == {i: 25.0 for i in range(12)} for g in a100)
    h100 = parse_nvlink_status(capture_section(H100_590, "capabilities :: nvlink -s"))
    assert len(h100[0].links) == 18 and h100[0].links[17] == 26.562


def test_nvlink_inactive_link_and_mig() -> None:
    [g] = parse_nvlink_status("GPU 0: X (UUID: GPU-1)\n\t Link 0: <inactive>\n\t Link 1: 25 GB/s\n")
    assert g.links == {0: None, 1: 25.0}
    assert parse_nvlink_status("Nvlink queries are not supported for Devices in MIG mode\n") == []
