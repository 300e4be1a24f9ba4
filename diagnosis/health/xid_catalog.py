"""What an NVIDIA XID means and what to do about it.

Source: NVIDIA's "Analyzing XID Catalog" (XID errors documentation), as mirrored in the
leptonai/gpud generated catalog of 2025-10-29; the immediate-action buckets are NVIDIA's
(``RESTART_APP``, ``RESET_GPU``, ``RESTART_BM`` = reboot the node, ...). NVIDIA's Kubernetes
device plugin treats 13, 31, 43, 45 and 68 as application errors that leave the GPU healthy.

``hardware`` says whether the XID points at the GPU or node (worth a health report and a cause)
rather than at the application or driver bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    action: str          # NVIDIA's immediate resolution bucket
    hardware: bool       # implicates the GPU / node, not the application
    severity: str = "warning"   # "critical": take the GPU out of the job now


_ACTIONS = {
    "IGNORE": "no action needed now; watch for repeats",
    "RESTART_APP": "restart the application",
    "RESET_GPU": "drain the GPU and reset it (nvidia-smi -r) before it runs work again",
    "RESTART_BM": "drain the node and reboot it; if it repeats, replace the hardware",
    "RESTART_VM": "restart the VM",
    "CHECK_MECHANICALS": "check the GPU's power cabling and seating",
    "UPDATE_SWFW": "update the driver / firmware",
    "WORKFLOW_NVLINK_ERR": "check the NVLink error counters (nvidia-smi nvlink -e), then "
                           "contact support",
    "WORKFLOW_XID_48": "drain the GPU and reset it; expect XID 63/64 or 94/95 with it; "
                       "replace if uncorrectable errors repeat",
    "CONTACT_SUPPORT": "contact NVIDIA support",
}


def action_text(bucket: str) -> str:
    """The instruction for an action bucket."""
    return _ACTIONS.get(bucket, bucket.replace("_", " ").lower())


def _add(table: dict[int, XidInfo], codes: tuple[int, ...], meaning: str, action: str,
         hardware: bool, severity: str = "warning") -> None:
    for c in codes:
        table[c] = XidInfo(c, meaning, action, hardware, severity)


CATALOG: dict[int, XidInfo] = {}
_add(CATALOG, (8,), "GPU stopped processing (channel idle timeout)", "RESTART_APP", False)
_add(CATALOG, (13,), "graphics engine exception (usually an application bug)", "RESTART_APP",
     False)
_add(CATALOG, (31,), "GPU memory page fault (application bug or driver)", "RESTART_APP", False)
_add(CATALOG, (11, 25, 32, 80), "invalid or corrupted push buffer", "RESTART_APP", False)
_add(CATALOG, (37, 38, 66, 67), "driver firmware error / illegal access by driver", "IGNORE",
     False)
_add(CATALOG, (43,), "GPU stopped processing (channel reset after an application fault)",
     "IGNORE", False)
_add(CATALOG, (44,), "graphics engine fault during context switch", "IGNORE", False)
_add(CATALOG, (45,), "preemptive cleanup after earlier errors", "IGNORE", False)
_add(CATALOG, (46,), "GPU stopped processing", "RESET_GPU", True, "critical")
_add(CATALOG, (48,), "double-bit (uncorrectable) ECC error", "WORKFLOW_XID_48", True, "critical")
_add(CATALOG, (54,), "auxiliary power not connected", "CHECK_MECHANICALS", True, "critical")
_add(CATALOG, (62,), "internal micro-controller halt", "RESET_GPU", True, "critical")
_add(CATALOG, (63,), "row remapping / page retirement event (applies after a reset)", "IGNORE",
     True)
_add(CATALOG, (64,), "row remapping failure", "RESET_GPU", True, "critical")
_add(CATALOG, (68, 82, 83, 84, 86, 88, 89, *range(96, 106), 139),
     "video decode / JPEG / optical-flow engine exception", "RESTART_APP", False)
_add(CATALOG, (39, 40, 41, 70, 71, 72, 75, 76, 77, 85, *range(126, 136)),
     "copy engine exception", "RESTART_APP", False)
_add(CATALOG, (74,), "NVLink error", "WORKFLOW_NVLINK_ERR", True, "critical")
_add(CATALOG, (78,), "vGPU start error", "UPDATE_SWFW", False)
_add(CATALOG, (79,), "GPU has fallen off the bus", "RESTART_BM", True, "critical")
_add(CATALOG, (92,), "high single-bit ECC error rate", "IGNORE", True)
_add(CATALOG, (93,), "InfoROM wear limit exceeded", "IGNORE", False)
_add(CATALOG, (94,), "contained uncorrectable memory error", "RESTART_APP", True)
_add(CATALOG, (95,), "uncontained uncorrectable memory error", "RESET_GPU", True, "critical")
_add(CATALOG, (109,), "context-switch timeout", "RESET_GPU", True, "critical")
_add(CATALOG, (110,), "security fault", "RESET_GPU", True, "critical")
_add(CATALOG, (119,), "GSP RPC timeout", "RESET_GPU", True, "critical")
_add(CATALOG, (120,), "GSP error", "RESET_GPU", True, "critical")
_add(CATALOG, (121,), "C2C (chip-to-chip) error", "IGNORE", True)
_add(CATALOG, (136,), "NVLink link training failed", "RESET_GPU", True, "critical")
_add(CATALOG, (137,), "NVLink privilege error", "IGNORE", False)
_add(CATALOG, (140,), "unrecovered ECC error", "RESET_GPU", True, "critical")
_add(CATALOG, (143,), "GPU initialization error", "RESET_GPU", True, "critical")
_add(CATALOG, tuple(range(144, 151)), "NVLink5 unit error", "RESET_GPU", True, "critical")
_add(CATALOG, (151,), "key rotation error (confidential computing)", "RESTART_VM", False)
_add(CATALOG, (154,), "GPU recovery action changed (the line states the action)", "IGNORE",
     True)
_add(CATALOG, (155,), "NVLink software-defined error", "RESET_GPU", True, "critical")
_add(CATALOG, (156,), "resource retirement event", "RESET_GPU", True, "critical")
_add(CATALOG, (157,), "resource retirement failure", "IGNORE", True)
_add(CATALOG, (158,), "GPU fatal timeout", "RESET_GPU", True, "critical")
_add(CATALOG, (159,), "CHI non-data error", "CONTACT_SUPPORT", True)


def xid_info(code: int) -> XidInfo:
    """The catalog entry of ``code``; an XID the catalog does not list (new drivers add them)
    is taken as hardware-relevant, with the advice to look it up."""
    return CATALOG.get(code, XidInfo(code, f"XID {code} (not in c4's catalog: see NVIDIA's XID "
                                     "catalog)", "CONTACT_SUPPORT", True))


def action_of_154(text: str) -> str | None:
    """XID 154 states the recovery action: ``... changed from 0x0 (None) to 0x4 (Drain and
    Reset)`` → ``Drain and Reset``."""
    _, sep, tail = text.rpartition(" to ")
    if not sep:
        return None
    name = tail.split("(", 1)[-1].rstrip(").") if "(" in tail else tail
    return name.strip() or None
