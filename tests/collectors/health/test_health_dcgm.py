"""dcgm-exporter scrape and counters CSV, dcgmi diag tables."""

from __future__ import annotations

import pytest

from collectors.health.dcgm import (
    parse_dcgmi_diag,
    parse_exporter_counters,
    parse_exporter_scrape,
)
from collectors.health.errors import HealthParseError
from tests.collectors.health.fixtures import text


def test_scrape_two_hosts_and_k8s_sample_without_trailing_newline() -> None:
    t4a, t4b, a10g = parse_exporter_scrape(text("dcgm_exporter_metrics_t4_datadog_fixture.prom"))
    assert t4a.uuid == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e" and t4a.name == "Tesla T4"
    assert t4a.values == {"sm_clock_mhz": 300, "temp_c": 25, "power_w": 8.969, "util_pct": 0,
                          "xid_last": 0}
    assert t4b.uuid == "GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5"
    assert t4b.reasons == {"idle"}  # DCGM_FI_DEV_CLOCK_THROTTLE_REASONS 1 (old field name)
    assert a10g.name == "NVIDIA A10G" and a10g.values == {}


def test_blank_sentinel_is_absent() -> None:
    scrape = ('DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-1"} 9223372036854775794\n'
              'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 61\n'
              'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="0",UUID="GPU-1"} 72\n')
    [g] = parse_exporter_scrape(scrape)
    assert g.values == {"temp_c": 61}
    assert g.reasons == {"hw_slowdown", "hw_thermal_slowdown"}  # 0x8 | 0x40


def test_counters_csv_enabled_and_commented_fields() -> None:
    fields = parse_exporter_counters(text("dcgm_exporter_default_counters.csv"))
    by_name = {f.name: f for f in fields}
    assert by_name["DCGM_FI_DEV_SM_CLOCK"].kind == "gauge"
    assert by_name["DCGM_FI_DEV_SM_CLOCK"].help == "SM clock frequency (in MHz)."
    assert by_name["DCGM_FI_DEV_XID_ERRORS"].enabled
    assert sum(f.enabled for f in fields) == 26 and len(fields) == 63
    dcp = parse_exporter_counters(text("dcgm_exporter_dcp_metrics_included.csv"))
    assert sum(f.enabled for f in dcp) == 26 and len(dcp) == 59


def test_diag_deployment_error_joined_across_rows() -> None:
    [row] = parse_dcgmi_diag(text("dcgmi_diag_deployment_row_remap_pending_excerpt.txt"))
    assert (row.section, row.name) == ("Deployment", "Error")
    assert row.text == "GPU 3 has uncorrectable memory errors and row remappings are pending"


def test_diag_fail_list_and_midword_wrapped_warning() -> None:
    mem, warn = parse_dcgmi_diag(text("dcgmi_diag_r2_memory_fail_thermal_warning_excerpt.txt"))
    assert mem.name == "GPU Memory" and mem.results == {"Pass": [1, 2, 3, 4, 5, 6, 7], "Fail": [0]}
    assert warn.text == ("GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds "
                         "into the test for GPU 0 Verify that the cooling on this machine is "
                         "functional, including external, thermal material interface, fans, "
                         "and any other components.")


def test_diag_r3_printed_twice() -> None:
    rows = parse_dcgmi_diag(text("dcgmi_diag_r3_dcgm339_2gpu_printed_twice.txt"))
    assert len(rows) == 36 and rows[:18] == rows[18:]
    meta = {r.name: r.text for r in rows[:3]}
    assert meta == {"DCGM Version": "3.3.9", "Driver Version Detected": "570.172.08",
                    "GPU Device IDs Detected": "2bb5,2bb5"}
    assert {r.name: r.results for r in rows[3:12]}["Page Retirement/Row Remap"] == {"Pass": None}
    pcie = next(r for r in rows if r.name == "PCIe")
    assert pcie.section == "Integration" and pcie.results == {"Skip": None}


def test_diag_unknown_result() -> None:
    bad = "| PCIe                      | Maybe                                          |\n"
    with pytest.raises(HealthParseError, match=r"d.txt:1: result 'Maybe'"):
        parse_dcgmi_diag(bad, "d.txt")
