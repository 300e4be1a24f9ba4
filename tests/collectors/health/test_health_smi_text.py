"""nvidia-smi -q text on every recorded driver generation: the values each sample shows."""

from __future__ import annotations

import pytest

from collectors.health.errors import HealthParseError
from collectors.health.smi_text import parse_smi_text
from tests.collectors.health.fixtures import capture_section, text

H100_590 = "nvidia_smi_capture_h100_driver590_full.txt"


def test_h100_driver560_complete_sample() -> None:
    [g] = parse_smi_text(text("nvidia_smi_q_h100_driver560_della.txt"))
    assert g.bus_id == "00000000:DB:00.0"
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert g.uuid == "GPU-f7b02328-d6fe-5b1f-9683-15041689bb03"
    v = g.values
    assert (v["temp_c"], v["mem_temp_c"], v["power_w"], v["power_limit_w"]) == (34, 40, 71.53, 700)
    assert (v["sm_clock_mhz"], v["sm_clock_max_mhz"]) == (345, 1980)
    assert (v["pcie_gen"], v["pcie_gen_max"]) == (5, 5)
    assert (v["pcie_width"], v["pcie_width_max"]) == (16, 16)
    assert v["pcie_replays"] == 6
    # 560 splits SRAM uncorrectable into parity + SEC-DED: the signal is their sum
    assert v["ecc_sram_unc_vol"] == 0 and v["ecc_sram_unc_agg"] == 0
    assert v["remap_banks_max"] == 2560 and v["remap_pending"] == 0 and v["remap_failure"] == 0
    assert v["reset_required"] == 0 and v["drain_reset_recommended"] == 0
    # Retired Pages are N/A on H100 (remapped rows instead): absent, not zero
    assert "retired_sbe" not in v and "retired_pending" not in v
    assert g.reasons == {"idle"}


def test_h800_driver525_old_throttle_reasons_name() -> None:
    [g] = parse_smi_text(text("nvidia_smi_q_h800_driver525_throttle_reasons.txt"))
    assert g.bus_id == "00000000:18:00.0" and g.name == "NVIDIA H800"
    assert g.reasons == {"idle"}  # read from "Clocks Throttle Reasons"
    assert g.values["power_w"] == 74.71  # "Power Readings", not "GPU Power Readings"
    assert g.values["power_limit_w"] == 700
    # ECC mode disabled: every ECC counter N/A
    assert not any(k.startswith("ecc_") for k in g.values)


def test_a100_after_xid63_remap_pending_with_elisions() -> None:
    [g] = parse_smi_text(text("nvidia_smi_q_a100_xid63_remapped_rows_excerpt.txt"))
    assert g.bus_id == "00000000:10:1C.0"
    v = g.values
    assert v["ecc_dram_corr_vol"] == 177 and v["ecc_dram_corr_agg"] == 177
    assert v["remap_corr"] == 1 and v["remap_unc"] == 0
    assert v["remap_pending"] == 1 and v["remap_failure"] == 0
    assert (v["remap_banks_max"], v["remap_banks_high"]) == (639, 1)


def test_sram_uncorrectable_excerpt_without_gpu_header() -> None:
    [g] = parse_smi_text(text("nvidia_smi_q_sram_uncorrectable_excerpt.txt"))
    assert g.bus_id == ""
    assert g.values["ecc_sram_unc_vol"] == 1 and g.values["ecc_sram_unc_agg"] == 5


@pytest.mark.parametrize("state, power, sm, gen_max", [("idle", 69.85, 345, 5),
                                                        ("load", 629.45, 1980, 5)])
def test_driver590_capture_average_power_and_event_counters(state: str, power: float, sm: float,
                                                            gen_max: float) -> None:
    [g] = parse_smi_text(capture_section(H100_590, f"{state} :: query (-q)"))
    v = g.values
    assert v["power_w"] == power  # 590: "Average Power Draw"
    assert v["sm_clock_mhz"] == sm and v["pcie_gen_max"] == gen_max
    assert v["event_us_hw_thermal"] == 0 and v["event_us_sw_power_cap"] == 0
    assert "hw_thermal_slowdown" not in g.reasons


def test_driver590_idle_replays() -> None:
    [g] = parse_smi_text(capture_section(H100_590, "idle :: query (-q)"))
    assert g.values["pcie_replays"] == 9
    assert g.reasons == {"idle"}


def test_mig_capture_parses() -> None:
    gpus = parse_smi_text(capture_section("nvidia_smi_capture_h100_mig_driver590_full.txt",
                                          "load :: query (-q)"))
    assert len(gpus) == 1 and gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_crlf_and_ansi_read_the_same() -> None:
    plain = text("nvidia_smi_q_h100_driver560_della.txt")
    crlf = plain.replace("\n", "\r\n").replace("Temperature\r\n",
                                               "\x1b[1mTemperature\x1b[0m\r\n")
    assert parse_smi_text(crlf) == parse_smi_text(plain)


def test_bad_indent_names_the_line() -> None:
    bad = "GPU 00000000:DB:00.0\n    Temperature\n   GPU Current Temp : 34 C\n"
    with pytest.raises(HealthParseError, match=r":3: indent of 3 spaces"):
        parse_smi_text(bad, "node1.txt")


def test_unreadable_value_names_the_line() -> None:
    bad = "GPU 00000000:DB:00.0\n    Temperature\n        GPU Current Temp : hot\n"
    with pytest.raises(HealthParseError, match=r"x:3: Temperature/GPU Current Temp"):
        parse_smi_text(bad, "x")
