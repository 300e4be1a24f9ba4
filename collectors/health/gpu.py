"""One GPU's health at one moment, whichever tool it was read from (NVML, ``nvidia-smi -q``
text or XML, ``--query-gpu`` CSV, a dcgm-exporter scrape): the same names for the same facts, so
that the rules and the model never care which driver generation or tool printed them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from c4.proto.health import REASON_BITS

#: the signal names a GpuSample may carry (all optional: a tool or part without one leaves it out)
GPU_SIGNALS = (
    "temp_c", "mem_temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "sm_clock_max_mhz",
    "util_pct", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "pcie_replays",
    "ecc_sram_corr_vol", "ecc_sram_unc_vol", "ecc_dram_corr_vol", "ecc_dram_unc_vol",
    "ecc_sram_corr_agg", "ecc_sram_unc_agg", "ecc_dram_corr_agg", "ecc_dram_unc_agg",
    "retired_sbe", "retired_dbe", "retired_pending",
    "remap_corr", "remap_unc", "remap_pending", "remap_failure",
    "remap_banks_max", "remap_banks_high", "remap_banks_partial", "remap_banks_low",
    "remap_banks_none", "reset_required", "drain_reset_recommended",
    "event_us_sw_power_cap", "event_us_sync_boost", "event_us_sw_thermal",
    "event_us_hw_thermal", "event_us_hw_power_brake", "xid_last",
    "nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors",
    "ecc_corr_vol_total", "ecc_unc_vol_total",
)

def reasons_from_mask(mask: int) -> frozenset[str]:
    """The reason names of an NVML/DCGM clock event bitmask."""
    return frozenset(name for bit, name in REASON_BITS.items() if mask & bit)


_PCI = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?$")


def pci_key(bus_id: str) -> str:
    """A PCI address as ``dddd:bb:dd`` in lower case, the form the kernel's XID lines use: the
    8-digit domain of nvidia-smi (``00000000:DB:00.0``) cut to 4 and the function dropped, so
    that a GPU read from nvidia-smi and an XID line about it compare equal. Raises ValueError
    for text that is not a PCI address."""
    m = _PCI.match(bus_id.strip())
    if m is None:
        raise ValueError(f"{bus_id!r} is not a PCI address (dddd:bb:dd[.f])")
    domain = (m.group(1) or "0000")[-4:]
    return f"{domain}:{m.group(2)}:{m.group(3)}".lower()


@dataclass
class GpuSample:
    """One GPU as a tool printed it: ``bus_id`` as printed (empty when the text did not say),
    ``values`` by the names of GPU_SIGNALS (a signal the tool left out or printed as N/A is
    absent, never 0), and the clock event reasons active at the time."""

    bus_id: str
    values: dict[str, float] = field(default_factory=dict)
    reasons: frozenset[str] = frozenset()
    name: str = ""
    uuid: str = ""
    index: int | None = None
