"""DCGM as a node shows it: a dcgm-exporter scrape (Prometheus text) → GpuSample per GPU, the
exporter's counters CSV (which fields it is set to export), and ``dcgmi diag`` tables.

Facts from dcgm_fields.h / dcgm_structs.h: ``DCGM_FI_DEV_XID_ERRORS`` is the value of the last
XID (a gauge, not a count); blank values (int64 ≥ 0x7ffffffffffffff0, int32 ≥ 0x7ffffff0) mean
"not found / not supported", never a number; ``CLOCK_THROTTLE_REASONS`` is the old name of
``CLOCKS_EVENT_REASONS`` (field 112, the NVML bitmask).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from collectors.health.errors import HealthParseError
from collectors.health.gpu import GpuSample, reasons_from_mask

_SIGNALS = {
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz", "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_MEMORY_TEMP": "mem_temp_c", "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replays", "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_XID_ERRORS": "xid_last", "DCGM_FI_DEV_PCIE_LINK_GEN": "pcie_gen",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": "pcie_width",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_corr_vol_total",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_unc_vol_total",
    "DCGM_FI_DEV_RETIRED_SBE": "retired_sbe", "DCGM_FI_DEV_RETIRED_DBE": "retired_dbe",
    "DCGM_FI_DEV_RETIRED_PENDING": "retired_pending",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remap_unc",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remap_corr",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remap_failure",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remap_pending",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "nvlink_crc_errors",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "nvlink_replay_errors",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "nvlink_recovery_errors",
}
_REASON_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
#: the int64 blank and above: "no value" (as a float the exporter may print it rounded)
_BLANK = float(0x7FFFFFFFFFFFFFF0)


def parse_exporter_scrape(text: str, source: str = "dcgm-exporter") -> list[GpuSample]:
    """One GpuSample per GPU (host, UUID, MIG instance) of a dcgm-exporter scrape, in
    first-seen order. Samples
    without a ``gpu`` label (some test fixtures print bare names) are skipped: a value that
    names no GPU cannot be blamed on one."""
    gpus: dict[str, GpuSample] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        raise HealthParseError(f"not Prometheus text exposition ({e})", source=source) from None
    for fam in families:
        for s in fam.samples:
            gpu = s.labels.get("gpu")
            if gpu is None:
                continue
            # one scrape file may hold several hosts; MIG instances share the GPU label
            key = "/".join((s.labels.get("Hostname", ""), s.labels.get("UUID") or gpu,
                            s.labels.get("GPU_I_ID", "")))
            g = gpus.get(key)
            if g is None:
                g = gpus[key] = GpuSample(s.labels.get("pci_bus_id", ""), {}, frozenset(),
                                          s.labels.get("modelName", ""), s.labels.get("UUID", ""),
                                          int(gpu) if gpu.isdigit() else None)
            value = float(s.value)
            if value != value or value >= _BLANK:
                continue
            name = s.name
            if name in _SIGNALS:
                g.values[_SIGNALS[name]] = value
            elif name in _REASON_FIELDS:
                g.reasons = g.reasons | reasons_from_mask(int(value))
    return list(gpus.values())


@dataclass
class ExporterField:
    """One line of a dcgm-exporter counters CSV."""

    name: str
    kind: str  # gauge, counter or label
    help: str
    enabled: bool


def parse_exporter_counters(text: str, source: str = "counters.csv") -> list[ExporterField]:
    """The fields of a counters CSV; commented-out field lines come back with enabled=False,
    other comments are skipped."""
    out = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        enabled = True
        if line.startswith("#"):
            line = line.lstrip("#").strip()
            enabled = False
            if not line.startswith(("DCGM_", "dcgm_")):
                continue
        if not line:
            continue
        cells = next(csv.reader([line], skipinitialspace=True))
        if len(cells) < 3:
            if not enabled:
                continue  # prose in a comment that happens to start with DCGM_
            raise HealthParseError("expected 'DCGM FIELD, type, help'", source=source, line=no)
        kind = cells[1].strip()
        if kind not in ("gauge", "counter", "label", "histogram", "summary"):
            if not enabled:
                continue
            raise HealthParseError(f"type {kind!r} is not gauge, counter or label",
                                   source=source, line=no)
        out.append(ExporterField(cells[0].strip(), kind, ",".join(cells[2:]).strip(), enabled))
    return out


@dataclass
class DiagRow:
    """One test (or message) of a ``dcgmi diag`` table: ``results`` maps a status (``Pass``,
    ``Fail``, ``Skip``, ``Warn``) to the GPU ids it names (``None``: all GPUs, or not said);
    a message row (Error, Warning, Info) carries its text joined back across wrapped lines."""

    section: str
    name: str
    results: dict[str, list[int] | None] = field(default_factory=dict)
    text: str = ""


_SECTION = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_RESULT = re.compile(r"^(Pass|Fail|Skip|Warn)(?: - (?:All|GPUs?: ([\d, ]+)))?$")
_MESSAGE_ROWS = ("Error", "Warning", "Info")
#: a result cell is 46 characters wide; DCGM wraps messages at 45 of them, mid-word
_NAME = slice(2, 27)
_CELL = slice(30, 75)


def parse_dcgmi_diag(text: str, source: str = "dcgmi diag") -> list[DiagRow]:
    """The rows of one or more ``dcgmi diag`` tables (a job that ran it on two tasks prints it
    twice: the rows repeat)."""
    rows: list[DiagRow] = []
    section = ""
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r\n")
        if m := _SECTION.match(line):
            section = m.group(1)
            continue
        if not line.startswith("|") or line.startswith("| Diagnostic "):
            continue
        name = line[_NAME].strip()
        cell = line[_CELL]
        if not name:
            if not rows:
                raise HealthParseError("a continuation row before any named row",
                                       source=source, line=no)
            _continue(rows[-1], cell, source, no)
            continue
        row = DiagRow(section, name)
        rows.append(row)
        _continue(row, cell, source, no)
    for row in rows:
        row.text = " ".join(row.text.split())
    return rows


def _continue(row: DiagRow, cell: str, source: str, no: int) -> None:
    if row.name in _MESSAGE_ROWS or row.section == "Metadata":
        row.text += cell.rstrip(" |") if row.name in _MESSAGE_ROWS else cell.strip()
        return
    status = cell.strip()
    m = _RESULT.match(status)
    if m is None:
        raise HealthParseError(f"result {status!r} of {row.name!r} is not Pass/Fail/Skip/Warn "
                               "[- All | - GPUs: ...]", source=source, line=no)
    ids = [int(x) for x in m.group(2).replace(" ", "").split(",") if x] if m.group(2) else None
    row.results[m.group(1)] = ids
