"""``nvidia-smi -q -x`` (XML, DTD v11 to v13) → GpuSample per GPU.

v11 (515) names the reasons ``clocks_throttle_reason_*``; v12 (535) ``clocks_event_reason_*``;
v13 adds ``clocks_event_reasons_counters`` and splits SRAM uncorrectable into parity and SEC-DED
and power into ``average``/``instant``. ``<remapped_rows>`` is the text ``N/A`` on parts without
row remapping and under MIG. Python's ElementTree does not fetch the DTD the file names.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from collectors.health.errors import HealthParseError
from collectors.health.gpu import GpuSample
from collectors.health.values import flag, number

_EVENT_COUNTERS = "clocks_event_reasons_counters/clocks_event_reasons_counters_"
_NUMBERS: dict[str, tuple[str, ...]] = {
    "temp_c": ("temperature/gpu_temp",),
    "mem_temp_c": ("temperature/memory_temp",),
    "power_w": ("gpu_power_readings/power_draw", "gpu_power_readings/average_power_draw",
                "power_readings/power_draw", "power_readings/average_power_draw"),
    "power_limit_w": ("gpu_power_readings/current_power_limit", "power_readings/power_limit",
                      "power_readings/current_power_limit"),
    "sm_clock_mhz": ("clocks/sm_clock",),
    "sm_clock_max_mhz": ("max_clocks/sm_clock",),
    "util_pct": ("utilization/gpu_util",),
    "pcie_gen": ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",),
    "pcie_gen_max": ("pci/pci_gpu_link_info/pcie_gen/max_link_gen",),
    "pcie_width": ("pci/pci_gpu_link_info/link_widths/current_link_width",),
    "pcie_width_max": ("pci/pci_gpu_link_info/link_widths/max_link_width",),
    "pcie_replays": ("pci/replay_counter",),
    "retired_sbe": ("retired_pages/multiple_single_bit_retirement/retired_count",),
    "retired_dbe": ("retired_pages/double_bit_retirement/retired_count",),
    "remap_corr": ("remapped_rows/remapped_row_corr",),
    "remap_unc": ("remapped_rows/remapped_row_unc",),
    "event_us_sw_power_cap": (_EVENT_COUNTERS + "sw_power_cap",),
    "event_us_sync_boost": (_EVENT_COUNTERS + "sync_boost",),
    "event_us_sw_thermal": (_EVENT_COUNTERS + "sw_therm_slowdown",),
    "event_us_hw_thermal": (_EVENT_COUNTERS + "hw_therm_slowdown",),
    "event_us_hw_power_brake": (_EVENT_COUNTERS + "hw_power_brake",),
}
for _b in ("max", "high", "partial", "low", "none"):
    _NUMBERS[f"remap_banks_{_b}"] = (
        f"remapped_rows/row_remapper_histogram/row_remapper_histogram_{_b}",)
for _scope, _suffix in (("volatile", "vol"), ("aggregate", "agg")):
    for _kind, _name in (("sram_correctable", "sram_corr"), ("dram_correctable", "dram_corr"),
                         ("dram_uncorrectable", "dram_unc")):
        _NUMBERS[f"ecc_{_name}_{_suffix}"] = (f"ecc_errors/{_scope}/{_kind}",)

_FLAGS: dict[str, tuple[str, ...]] = {
    "remap_pending": ("remapped_rows/remapped_row_pending",),
    "remap_failure": ("remapped_rows/remapped_row_failure",),
    "retired_pending": ("retired_pages/pending_retirement", "retired_pages/pending_blacklist"),
    "reset_required": ("gpu_reset_status/reset_required",),
    "drain_reset_recommended": ("gpu_reset_status/drain_and_reset_recommended",),
}
_REASONS = {
    "gpu_idle": "idle", "applications_clocks_setting": "applications_clocks",
    "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal_slowdown", "hw_power_brake_slowdown": "hw_power_brake",
    "sync_boost": "sync_boost", "sw_thermal_slowdown": "sw_thermal_slowdown",
    "display_clocks_setting": "display_clocks",
}


def parse_smi_xml(text: str | bytes, source: str = "nvidia-smi -q -x") -> list[GpuSample]:
    """Every ``<gpu>`` of one ``nvidia-smi -q -x`` document, in the order printed."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line = e.position[0] if getattr(e, "position", None) else None
        raise HealthParseError(f"not well-formed XML ({e})", source=source, line=line) from None
    if root.tag != "nvidia_smi_log":
        raise HealthParseError(f"root element is <{root.tag}>, expected <nvidia_smi_log> "
                               "(is this nvidia-smi -q -x output?)", source=source)
    return [_sample(gpu, source) for gpu in root.iter("gpu")]


def _text(gpu: ET.Element, path: str) -> str | None:
    node = gpu.find(path)
    return None if node is None or node.text is None else node.text


def _sample(gpu: ET.Element, source: str) -> GpuSample:
    bus_id = gpu.get("id", "")
    values: dict[str, float] = {}
    for table, conv in ((_NUMBERS, number), (_FLAGS, flag)):
        for signal, paths in table.items():
            for path in paths:
                text = _text(gpu, path)
                if text is None:
                    continue
                try:
                    v = conv(text)
                except ValueError as e:
                    raise HealthParseError(f"GPU {bus_id} <{path}>: {e}", source=source) from None
                if v is not None:
                    values[signal] = v
                break
    for scope, suffix in (("volatile", "vol"), ("aggregate", "agg")):
        got = [number(t) for p in ("sram_uncorrectable", "sram_uncorrectable_parity",
                                   "sram_uncorrectable_secded")
               if (t := _text(gpu, f"ecc_errors/{scope}/{p}")) is not None]
        if any(v is not None for v in got):
            values[f"ecc_sram_unc_{suffix}"] = sum(v for v in got if v is not None)
    reasons = set()
    for section, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                            ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        for tag, name in _REASONS.items():
            text = _text(gpu, f"{section}/{prefix}{tag}")
            if text is not None and flag(text) == 1.0:
                reasons.add(name)
    minor = _text(gpu, "minor_number")
    return GpuSample(bus_id, values, frozenset(reasons), _text(gpu, "product_name") or "",
                     _text(gpu, "uuid") or "",
                     int(minor) if minor and minor.isdigit() else None)
