"""Kernel log lines behind every reader's prefix: XIDs, SXids, AER, mlx5, OOM."""

from __future__ import annotations

from collectors.health.kernel import (
    parse_fabricmanager_log,
    parse_kernel_line,
    parse_kernel_log,
    split_prefix,
)
from tests.collectors.health.fixtures import text


def test_xid63_line_without_prefix_or_name() -> None:
    [e] = parse_kernel_log(text("kernel_xid63_row_remapper_line.log"))
    assert (e.kind, e.device, e.code) == ("xid", "0000:10:1c", 63)
    assert e.detail == {"pid": "1896", "name": ""}
    assert e.text == "Row Remapper: New row marked for remapping, reset gpu to activate."


def test_dmesg_T_xid119_and_the_uuid_line_before_it() -> None:
    events = parse_kernel_log(text("kernel_dmesg_T_xid119_gsp_timeout.log"))
    kinds = [(e.kind, e.code) for e in events]
    assert kinds.count(("xid", 119)) == 5 and kinds.count(("gpu_identity", None)) == 1
    ident, first = events[0], events[1]
    assert kinds[:2] == [("gpu_identity", None), ("xid", 119)]
    assert ident.device == "0000:9b:00" and ident.text == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
    assert first.time == "Sun Feb 23 16:24:18 2025"
    assert first.detail == {"pid": "2024380", "name": "nvidia-smi"}
    assert first.text.startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert events[-1].time == "Sun Feb 23 16:30:13 2025"


def test_dmesg_iso_xid13_burst_xid43_and_oom() -> None:
    events = parse_kernel_log(text("kernel_dmesg_decode_iso_xid13_xid43_oom.log"))
    kinds = [(e.kind, e.code) for e in events]
    assert kinds.count(("xid", 13)) == 16 and kinds.count(("xid", 43)) == 1
    assert kinds.count(("oom", None)) == 7
    xid43 = next(e for e in events if e.code == 43)
    assert xid43.detail == {"pid": "2924364", "name": "pt_main_thread"}
    assert xid43.time == "2025-01-21T04:41:44,287197+00:00" and xid43.device == "0000:38:00"
    assert events[0].detail["pid"] == "<unknown>"  # pid='<unknown>' quoted


def test_raw_kmsg_prefix_and_no_health_events() -> None:
    raw = text("kernel_dev_kmsg_raw_nvswitch.log")
    assert parse_kernel_log(raw) == []
    first = raw.splitlines()[0]
    assert split_prefix(first) == ("", "nvidia-nvswitch2: open (major=510)", 206764307, 3964,
                                   "info")


def test_aer_kernel_doc_example() -> None:
    head, bit = parse_kernel_log(text("kernel_pcie_aer_example_kernel_doc.log"))
    assert head.kind == "aer" and head.device == "0000:50:00.0"
    assert head.detail == {"severity": "Uncorrectable (Fatal)", "type": "Transaction Layer",
                           "agent": "Requester ID", "driver": ""}
    assert (bit.kind, bit.code, bit.text) == ("aer_bit", 20, "UnsupReq")


def test_line_shapes_from_the_format_notes() -> None:
    # the shapes FORMATS.md gives for lines no recorded sample holds
    old = parse_kernel_line("[  228.414765] NVRM: Xid (0000:03:00): 14, Channel 00000001")
    assert (old.code, old.device, old.time, old.text) == (14, "0000:03:00", "228.414765",
                                                         "Channel 00000001")
    off = parse_kernel_line("4,1,2,-;NVRM: GPU 0000:02:00.0: GPU has fallen off the bus.")
    assert (off.kind, off.code, off.priority, off.usec) == ("gpu_off_bus", 79, "warning", 2)
    sx = parse_kernel_line("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, "
                           "Link 32 egress non-posted PRIV error (First)")
    assert (sx.kind, sx.code, sx.detail["switch"]) == ("sxid", 12028, "nvidia-nvswitch3")
    down = parse_kernel_line("Mar  3 10:00:01 node7 kernel: mlx5_core 0000:17:00.0 ens1f0np0: "
                             "Link down")
    assert (down.kind, down.text, down.detail["netdev"], down.time) == (
        "ib_link", "down", "ens1f0np0", "Mar  3 10:00:01")
    mod = parse_kernel_line("mlx5_core 0000:17:00.0: Port module event[error]: module 0, "
                            "Cable error, Bad or shorted cable/module")
    assert (mod.kind, mod.code, mod.detail["error"]) == ("ib_module", 0, "yes")
    pcie = parse_kernel_line("nvidia 0000:9b:00.0: AER: PCIe Bus Error: severity=Corrected, "
                             "type=Physical Layer, (Receiver ID)")
    assert pcie.detail["driver"] == "nvidia" and pcie.detail["type"] == "Physical Layer"
    ansi = parse_kernel_line("\x1b[33m[  1.5] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, "
                             "GPU has fallen off the bus.\x1b[0m\r\n")
    assert ansi.code == 79 and ansi.time == "1.5"
    assert parse_kernel_line("IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready") is None


def test_fabric_manager_nvswitch_error() -> None:
    [e] = parse_fabricmanager_log(text("nvidia_fabricmanager_nvswitch_errors.log"))
    assert (e.kind, e.code, e.device) == ("nvswitch_error", 12028, "00000000:86:00.0")
    assert e.detail == {"severity": "non-fatal", "physical_id": "3", "port": "61"}
    assert e.time == "Feb 27 2025 15:10:02"
