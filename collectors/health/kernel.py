"""Kernel log lines → KernelEvent: GPU XIDs, NVSwitch SXids, "fallen off the bus", PCIe AER,
mlx5 link and cable events, the OOM killer.

The same message comes behind different prefixes by reader: raw ``/dev/kmsg`` records
(``prio,seq,usec,flags;msg``), ``dmesg`` (``[  228.414765] ``), ``dmesg -T`` (``[Sun Feb 23
16:24:18 2025] ``), ``dmesg --decode --time-format=iso`` (``kern  :warn  : 2025-01-21T04:41:44,
283302+00:00 ``) and syslog (``Mon DD HH:MM:SS host kernel: ``). The prefix is peeled off first;
lines that are none of the events above give nothing (most of a kernel log is not health).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from collectors.health.values import strip_ansi

_KMSG = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
_RAW = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_HUMAN = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]\s?(.*)$")
_ISO = re.compile(r"^\w+\s*:\s*\w+\s*: (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d+[+-]\d\d:\d\d) (.*)$")
_SYSLOG = re.compile(r"^(\w{3} +\d+ \d\d:\d\d:\d\d) \S+ kernel: (.*)$")

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+),\s*(.*)$")
_XID_PID = re.compile(r"^pid='?([^,']*)'?,(?: name=([^,]*),)? (.*)$")
_GPU_AT = re.compile(r"NVRM: GPU at PCI:([0-9a-fA-F:.]+): (GPU-[0-9a-fA-F-]+)")
_FM = re.compile(r"^\[([^\]]+)\] \[(\w+)\] \[tid \d+\] detected NVSwitch (non-fatal|fatal) error "
                 r"(\d+) on fid \d+ on NVSwitch pci bus id ([0-9a-fA-F:.]+) physical id (\d+) "
                 r"port (\d+)")
_SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+), (.*)$")
_OFF_BUS = re.compile(r"NVRM: GPU ([0-9a-fA-F:.]+): GPU has fallen off the bus")
_AER = re.compile(r"^(?:(\S+) )?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): "
                  r"(?:AER: )?PCIe Bus Error: severity=([^,]+), type=([^,]+), \(([^)]*)\)")
_AER_STATUS = re.compile(r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):\s+device "
                         r"\[([0-9a-f]{4}):([0-9a-f]{4})\] error status/mask=([0-9a-fA-F]{8})/")
_AER_BIT = re.compile(r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):\s+\[\s*(\d+)\] "
                      r"(\S+)")
_MLX5_LINK = re.compile(r"mlx5_core ([0-9a-fA-F:.]+) (\S+): Link (up|down)")
_MLX5_MODULE = re.compile(r"mlx5_core ([0-9a-fA-F:.]+):? .*Port module event(\[error\])?: "
                          r"module (\d+), (.*)$")
_OOM = re.compile(r"Out of memory: Kill(?:ed)? process (\d+)|oom-kill:"
                  r"|oom_reaper: reaped process (\d+)")

_PRIO = {0: "emerg", 1: "alert", 2: "crit", 3: "err", 4: "warning", 5: "notice", 6: "info",
         7: "debug"}


@dataclass
class KernelEvent:
    """One health event of the kernel log. ``kind``: ``xid``, ``sxid``, ``gpu_off_bus``,
    ``aer``, ``aer_bit``, ``ib_link``, ``ib_module``, ``oom``, ``gpu_identity`` (the PCI
    address → GPU UUID line that precedes an XID), ``nvswitch_error`` (Fabric Manager log).
    ``device`` is the PCI address as printed (an XID prints ``dddd:bb:dd``, no function),
    ``code`` the XID/SXid number or AER bit,
    ``time`` the reader's timestamp text and ``usec`` the monotonic microseconds of a kmsg
    record (None from other readers)."""

    kind: str
    device: str
    text: str
    code: int | None = None
    time: str = ""
    usec: int | None = None
    seq: int | None = None
    priority: str = ""
    detail: dict[str, str] = field(default_factory=dict)


def split_prefix(line: str) -> tuple[str, str, int | None, int | None, str]:
    """``(time, message, usec, seq, priority)`` of a kernel log line, whichever reader wrote it."""
    line = strip_ansi(line).rstrip("\r\n")
    if m := _KMSG.match(line):
        prio = int(m.group(1)) & 7
        return "", m.group(4), int(m.group(3)), int(m.group(2)), _PRIO[prio]
    for pattern in (_RAW, _HUMAN, _ISO, _SYSLOG):
        if m := pattern.match(line):
            return m.group(1), m.group(2), None, None, ""
    return "", line, None, None, ""


def parse_kernel_line(line: str) -> KernelEvent | None:
    """The health event one kernel log line reports, or None for any other line."""
    time, msg, usec, seq, prio = split_prefix(line)
    if m := _XID.search(msg):
        detail = {}
        rest = m.group(3)
        if p := _XID_PID.match(rest):
            detail = {"pid": p.group(1), "name": p.group(2) or ""}
            rest = p.group(3)
        return KernelEvent("xid", m.group(1).lower(), rest, int(m.group(2)), time, usec, seq,
                           prio, detail)
    if m := _SXID.search(msg):
        return KernelEvent("sxid", m.group(2).lower(), m.group(4), int(m.group(3)), time, usec,
                           seq, prio, {"switch": m.group(1)})
    if m := _GPU_AT.search(msg):
        # the context line before an XID: which GPU (by UUID) sits at that PCI address
        return KernelEvent("gpu_identity", m.group(1).lower(), m.group(2), None, time, usec,
                           seq, prio)
    if m := _OFF_BUS.search(msg):
        return KernelEvent("gpu_off_bus", m.group(1).lower(), "GPU has fallen off the bus",
                           79, time, usec, seq, prio)
    if m := _AER.search(msg):
        return KernelEvent("aer", m.group(2).lower(), msg, None, time, usec, seq, prio,
                           {"severity": m.group(3), "type": m.group(4), "agent": m.group(5),
                            "driver": m.group(1) or ""})
    if m := _AER_BIT.search(msg):
        return KernelEvent("aer_bit", m.group(1).lower(), m.group(3), int(m.group(2)), time,
                           usec, seq, prio)
    if m := _MLX5_LINK.search(msg):
        return KernelEvent("ib_link", m.group(1).lower(), m.group(3), None, time, usec, seq,
                           prio, {"netdev": m.group(2)})
    if m := _MLX5_MODULE.search(msg):
        return KernelEvent("ib_module", m.group(1).lower(), m.group(4), int(m.group(3)), time,
                           usec, seq, prio, {"error": "yes" if m.group(2) else "no"})
    if m := _OOM.search(msg):
        pid = m.group(1) or m.group(2) or ""
        return KernelEvent("oom", "", msg, None, time, usec, seq, prio, {"pid": pid})
    return None


def parse_kernel_log(text: str) -> list[KernelEvent]:
    """Every health event of a kernel log, in the order logged."""
    return [e for line in text.splitlines() if (e := parse_kernel_line(line)) is not None]


def parse_fabricmanager_log(text: str) -> list[KernelEvent]:
    """The NVSwitch errors of a Fabric Manager log (``/var/log/fabricmanager.log``)."""
    out = []
    for line in text.splitlines():
        if m := _FM.match(line.strip()):
            out.append(KernelEvent("nvswitch_error", m.group(5).lower(), line.strip(),
                                   int(m.group(4)), m.group(1), priority=m.group(2).lower(),
                                   detail={"severity": m.group(3), "physical_id": m.group(6),
                                           "port": m.group(7)}))
    return out
