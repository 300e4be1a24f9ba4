"""The other nvidia-smi outputs a collector may be configured to read:
``--query-gpu=... --format=csv`` → GpuSample per row, ``dmon`` → rows of numbers, and
``nvlink -s`` → link speeds per GPU (``None`` for an ``<inactive>`` link).

CSV: header names carry units in brackets (``power.draw [W]``), the separator is comma + space,
unsupported values are bracketed (``[N/A]``, ``[Not Supported]``), and
``clocks_throttle_reasons.*`` is printed back as ``clocks_event_reasons.*``.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

from collectors.health.errors import HealthParseError
from collectors.health.gpu import GpuSample, reasons_from_mask
from collectors.health.values import flag, number, strip_ansi

_FIELDS = {
    "temperature.gpu": "temp_c", "temperature.memory": "mem_temp_c",
    "power.draw": "power_w", "power.draw.average": "power_w", "power.limit": "power_limit_w",
    "clocks.sm": "sm_clock_mhz", "clocks.current.sm": "sm_clock_mhz",
    "clocks.max.sm": "sm_clock_max_mhz", "utilization.gpu": "util_pct",
    "pcie.link.gen.current": "pcie_gen", "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.width.current": "pcie_width", "pcie.link.width.max": "pcie_width_max",
    "ecc.errors.corrected.volatile.sram": "ecc_sram_corr_vol",
    "ecc.errors.corrected.volatile.dram": "ecc_dram_corr_vol",
    "ecc.errors.uncorrected.volatile.dram": "ecc_dram_unc_vol",
    "ecc.errors.corrected.aggregate.sram": "ecc_sram_corr_agg",
    "ecc.errors.corrected.aggregate.dram": "ecc_dram_corr_agg",
    "ecc.errors.uncorrected.aggregate.dram": "ecc_dram_unc_agg",
    "ecc.errors.uncorrected.volatile.sram": "ecc_sram_unc_vol",
    "ecc.errors.uncorrected.aggregate.sram": "ecc_sram_unc_agg",
    "ecc.errors.corrected.volatile.total": "ecc_corr_vol_total",
    "ecc.errors.uncorrected.volatile.total": "ecc_unc_vol_total",
    "retired_pages.sbe": "retired_sbe", "retired_pages.single_bit_ecc.count": "retired_sbe",
    "retired_pages.dbe": "retired_dbe", "retired_pages.double_bit.count": "retired_dbe",
    "remapped_rows.correctable": "remap_corr", "remapped_rows.uncorrectable": "remap_unc",
    "clocks_event_reasons_counters.sw_power_cap": "event_us_sw_power_cap",
    "clocks_event_reasons_counters.sync_boost": "event_us_sync_boost",
    "clocks_event_reasons_counters.sw_thermal_slowdown": "event_us_sw_thermal",
    "clocks_event_reasons_counters.hw_thermal_slowdown": "event_us_hw_thermal",
    "clocks_event_reasons_counters.hw_power_brake_slowdown": "event_us_hw_power_brake",
}
_FLAG_FIELDS = {
    "remapped_rows.pending": "remap_pending", "remapped_rows.failure": "remap_failure",
    "retired_pages.pending": "retired_pending",
}
_REASON_FIELDS = {
    "gpu_idle": "idle", "applications_clocks_setting": "applications_clocks",
    "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal_slowdown", "hw_power_brake_slowdown": "hw_power_brake",
    "sw_thermal_slowdown": "sw_thermal_slowdown", "sync_boost": "sync_boost",
}


def _field_name(header: str) -> str:
    name = header.split(" [", 1)[0].strip()
    # the old spelling is an accepted alias; drivers print the new one, old exports the old
    return name.replace("clocks_throttle_reasons", "clocks_event_reasons")


def parse_query_gpu_csv(text: str, source: str = "nvidia-smi --query-gpu") -> list[GpuSample]:
    """One GpuSample per row of ``--query-gpu=... --format=csv`` (with its header line; the
    ``nounits`` variant reads the same). Fields this module does not know are left out."""
    rows = list(csv.reader(text.splitlines(), skipinitialspace=True))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        return []
    names = [_field_name(h) for h in rows[0]]
    if "index" not in names and "pci.bus_id" not in names and "uuid" not in names:
        raise HealthParseError("header names neither index, pci.bus_id nor uuid: ask for one "
                               "of them so rows can be told apart", source=source, line=1)
    out = []
    for no, row in enumerate(rows[1:], 2):
        if len(row) != len(names):
            raise HealthParseError(f"{len(row)} values for {len(names)} header fields",
                                   source=source, line=no)
        rec = dict(zip(names, (c.strip() for c in row)))
        values: dict[str, float] = {}
        reasons: set[str] = set()
        try:
            for name, text_value in rec.items():
                if name in _FIELDS and (v := number(text_value)) is not None:
                    values[_FIELDS[name]] = v
                elif name in _FLAG_FIELDS and (v := flag(text_value)) is not None:
                    values[_FLAG_FIELDS[name]] = v
                elif name == "clocks_event_reasons.active":
                    if (v := number(text_value)) is not None:
                        reasons |= reasons_from_mask(int(v))
                elif name.startswith("clocks_event_reasons."):
                    key = name.split(".", 1)[1]
                    if key in _REASON_FIELDS and flag(text_value) == 1.0:
                        reasons.add(_REASON_FIELDS[key])
        except ValueError as e:
            raise HealthParseError(str(e), source=source, line=no) from None
        index = rec.get("index")
        out.append(GpuSample(rec.get("pci.bus_id", ""), values, frozenset(reasons),
                             rec.get("name", ""), rec.get("uuid", ""),
                             int(index) if index and index.isdigit() else None))
    return out


@dataclass
class DmonRow:
    """One ``nvidia-smi dmon`` row: the GPU index and each column by its header name (``pwr``,
    ``gtemp``, ``pclk``, ...); a ``-`` (not available) column is absent."""

    gpu: int
    values: dict[str, float] = field(default_factory=dict)


def parse_dmon(text: str, source: str = "nvidia-smi dmon") -> list[DmonRow]:
    """The rows of ``nvidia-smi dmon`` (two ``#`` header lines: names, then units)."""
    names: list[str] | None = None
    out = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = strip_ansi(raw).strip()
        if not line:
            continue
        if line.startswith("#"):
            if names is None:
                names = line.lstrip("#").split()
            continue
        if names is None:
            raise HealthParseError("a data row before the '# gpu ...' header", source=source,
                                   line=no)
        cells = line.split()
        if len(cells) != len(names):
            raise HealthParseError(f"{len(cells)} columns for {len(names)} in the header",
                                   source=source, line=no)
        try:
            row = DmonRow(int(cells[0]))
            for name, cell in zip(names[1:], cells[1:]):
                if (v := number(cell)) is not None:
                    row.values[name] = v
        except ValueError as e:
            raise HealthParseError(str(e), source=source, line=no) from None
        out.append(row)
    return out


_NVLINK_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?$")
_NVLINK_LINK = re.compile(r"^Link (\d+): (.+)$")


@dataclass
class NvlinkStatus:
    """``nvidia-smi nvlink -s`` for one GPU: each link's speed in GB/s, None when inactive."""

    gpu: int
    name: str
    uuid: str
    links: dict[int, float | None] = field(default_factory=dict)


def parse_nvlink_status(text: str, source: str = "nvidia-smi nvlink -s") -> list[NvlinkStatus]:
    out: list[NvlinkStatus] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = strip_ansi(raw).strip()
        if not line or line in ("...", "[...]"):
            continue
        if m := _NVLINK_GPU.match(line):
            out.append(NvlinkStatus(int(m.group(1)), m.group(2), m.group(3) or ""))
        elif m := _NVLINK_LINK.match(line):
            if not out:
                raise HealthParseError("a link line before any 'GPU n:' line", source=source,
                                       line=no)
            speed = m.group(2).strip()
            out[-1].links[int(m.group(1))] = None if speed == "<inactive>" else number(speed)
        elif "not supported" in line.lower():
            continue  # MIG mode: "Nvlink queries are not supported for Devices in MIG mode"
        else:
            raise HealthParseError(f"neither 'GPU n: name' nor 'Link n: speed': {line!r}",
                                   source=source, line=no)
    return out
