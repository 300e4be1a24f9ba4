"""``nvidia-smi -q`` (text) → GpuSample per GPU.

The text nests by indentation (4 spaces a level) and puts the colon at a column that moved
between drivers, so a line is split on its first ``" : "`` and placed by its indent. The same
facts sit under different names by driver (``Clocks Throttle Reasons`` up to 525, ``Clocks Event
Reasons`` from 535; ``Power Readings`` / ``GPU Power Readings``; ``Power Draw`` split into
``Average``/``Instantaneous`` by 590; ``SRAM Uncorrectable`` split into ``Parity`` + ``SEC-DED``
in 560): every known spelling maps to one signal name.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from collectors.health.errors import HealthParseError
from collectors.health.gpu import GpuSample
from collectors.health.values import flag, number, strip_ansi

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_ELISION = frozenset({"[...]", "...", "…"})

#: signal ← paths (section titles and key joined by "/"), first present wins
_NUMBERS: dict[str, tuple[str, ...]] = {
    "temp_c": ("Temperature/GPU Current Temp",),
    "mem_temp_c": ("Temperature/Memory Current Temp",),
    "power_w": ("GPU Power Readings/Power Draw", "GPU Power Readings/Average Power Draw",
                "Power Readings/Power Draw"),
    "power_limit_w": ("GPU Power Readings/Current Power Limit", "Power Readings/Power Limit"),
    "sm_clock_mhz": ("Clocks/SM",),
    "sm_clock_max_mhz": ("Max Clocks/SM",),
    "util_pct": ("Utilization/Gpu",),
    "pcie_gen": ("PCI/GPU Link Info/PCIe Generation/Current",),
    "pcie_gen_max": ("PCI/GPU Link Info/PCIe Generation/Max",),
    "pcie_width": ("PCI/GPU Link Info/Link Width/Current",),
    "pcie_width_max": ("PCI/GPU Link Info/Link Width/Max",),
    "pcie_replays": ("PCI/Replays Since Reset",),
    "retired_sbe": ("Retired Pages/Single Bit ECC",),
    "retired_dbe": ("Retired Pages/Double Bit ECC",),
    "remap_corr": ("Remapped Rows/Correctable Error",),
    "remap_unc": ("Remapped Rows/Uncorrectable Error",),
    "remap_banks_max": ("Remapped Rows/Bank Remap Availability Histogram/Max",),
    "remap_banks_high": ("Remapped Rows/Bank Remap Availability Histogram/High",),
    "remap_banks_partial": ("Remapped Rows/Bank Remap Availability Histogram/Partial",),
    "remap_banks_low": ("Remapped Rows/Bank Remap Availability Histogram/Low",),
    "remap_banks_none": ("Remapped Rows/Bank Remap Availability Histogram/None",),
    "event_us_sw_power_cap": ("Clocks Event Reasons Counters/SW Power Capping",),
    "event_us_sync_boost": ("Clocks Event Reasons Counters/Sync Boost",),
    "event_us_sw_thermal": ("Clocks Event Reasons Counters/SW Thermal Slowdown",),
    "event_us_hw_thermal": ("Clocks Event Reasons Counters/HW Thermal Slowdown",),
    "event_us_hw_power_brake": ("Clocks Event Reasons Counters/HW Power Braking",),
}
for _scope, _suffix in (("Volatile", "vol"), ("Aggregate", "agg")):
    for _mem in ("SRAM", "DRAM"):
        _NUMBERS[f"ecc_{_mem.lower()}_corr_{_suffix}"] = (
            f"ECC Errors/{_scope}/{_mem} Correctable",)
    _NUMBERS[f"ecc_dram_unc_{_suffix}"] = (f"ECC Errors/{_scope}/DRAM Uncorrectable",)

_FLAGS: dict[str, tuple[str, ...]] = {
    "remap_pending": ("Remapped Rows/Pending",),
    "remap_failure": ("Remapped Rows/Remapping Failure Occurred",),
    "retired_pending": ("Retired Pages/Pending Page Blacklist",),
    "reset_required": ("GPU Reset Status/Reset Required",),
    "drain_reset_recommended": ("GPU Reset Status/Drain and Reset Recommended",),
}
_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
_REASON_KEYS = {
    "Idle": "idle", "Applications Clocks Setting": "applications_clocks",
    "SW Power Cap": "sw_power_cap", "HW Slowdown": "hw_slowdown",
    "HW Slowdown/HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Slowdown/HW Power Brake Slowdown": "hw_power_brake", "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown", "Display Clock Setting": "display_clocks",
}


def flatten(text: str, source: str = "nvidia-smi -q") -> dict[str, dict[str, tuple[str, int]]]:
    """Each GPU's lines as ``{bus_id: {"Section/Sub/Key": (value, line_no)}}``; lines before the
    first GPU header at indent 0 are the log's own (``Driver Version`` ...) under ``""``. An
    excerpt that starts inside a GPU block (no header) is kept under ``""`` too."""
    gpus: dict[str, dict[str, tuple[str, int]]] = {"": {}}
    current = gpus[""]
    stack: list[str] = []
    base = 0  # the indent level of a block's top keys: 1 under a GPU header
    for no, raw in enumerate(text.splitlines(), 1):
        line = strip_ansi(raw).rstrip("\r\n")
        body = line.strip()
        if not body or body.startswith("=") or body in _ELISION:
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent % 4:
            raise HealthParseError(f"indent of {indent} spaces is not a multiple of 4 "
                                   f"(is this nvidia-smi -q output?)", source=source, line=no)
        level = indent // 4
        head = _GPU_HEADER.match(body)
        if level == 0 and head:
            current = gpus.setdefault(head.group(1), {})
            stack, base = [], 1
            continue
        if not stack and not current and level > base:
            base = level  # an excerpt cut from inside a GPU block
        level -= base
        if level < 0 or level > len(stack):
            raise HealthParseError(f"line indented {level} levels under a {len(stack)}-level "
                                   "section", source=source, line=no)
        del stack[level:]
        key, sep, value = body.partition(" : ")
        if not sep and body.endswith(" :"):
            key, sep, value = body[:-2], " :", ""
        key = key.strip()
        if sep:
            current["/".join([*stack, key])] = (value.strip(), no)
        stack.append(key)
    return gpus


def parse_smi_text(text: str, source: str = "nvidia-smi -q") -> list[GpuSample]:
    """Every GPU of one ``nvidia-smi -q`` output, in the order printed."""
    out = []
    for bus_id, rows in flatten(text, source).items():
        if not bus_id and not any("/" in k for k in rows):
            continue  # the log's own header lines, not a GPU
        out.append(_sample(bus_id, rows, source))
    return out


def _sample(bus_id: str, rows: dict[str, tuple[str, int]], source: str) -> GpuSample:
    values: dict[str, float] = {}

    def read(signal: str, paths: tuple[str, ...], conv: Callable[[str], float | None]) -> None:
        for path in paths:
            if path in rows:
                text, no = rows[path]
                try:
                    v = conv(text)
                except ValueError as e:
                    raise HealthParseError(f"{path}: {e}", source=source, line=no) from None
                if v is not None:
                    values[signal] = v
                return

    for signal, paths in _NUMBERS.items():
        read(signal, paths, number)
    for signal, paths in _FLAGS.items():
        read(signal, paths, flag)
    for scope, suffix in (("Volatile", "vol"), ("Aggregate", "agg")):
        # one counter up to 535, two (parity, SEC-DED) from 560: the signal is their sum
        parts = [f"ECC Errors/{scope}/SRAM Uncorrectable{p}" for p in ("", " Parity", " SEC-DED")]
        got = [number(rows[p][0]) for p in parts if p in rows]
        if any(v is not None for v in got):
            values[f"ecc_sram_unc_{suffix}"] = sum(v for v in got if v is not None)
    reasons = set()
    for section in _REASON_SECTIONS:
        for key, name in _REASON_KEYS.items():
            path = f"{section}/{key}"
            if path in rows and flag(rows[path][0]) == 1.0:
                reasons.add(name)
    name = rows.get("Product Name", ("", 0))[0]
    uuid = rows.get("GPU UUID", ("", 0))[0]
    return GpuSample(bus_id, values, frozenset(reasons), name, uuid)
