"""Hard evidence by rule: health records in, findings out.

Each rule looks at one component's samples and events as they come (in time order per
component) and opens or extends an *episode* of a finding; an episode ends when its condition
has not held for ``merge_gap_ns``. Counter rules (ECC, IB port errors) compare a counter with
its value ``window_ns`` earlier, so a counter that was high when the job began (a port's
lifetime symbol errors) is not news; only climbing is.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from c4.proto.health import SLOWDOWN_REASONS, HealthRecord
from c4.settings import positive, setting, validate
from diagnosis.errors import ConfigError
from diagnosis.health.findings import Finding
from diagnosis.health.xid_catalog import action_of_154, action_text, xid_info

S = 1_000_000_000
_RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class RuleConfig:
    """The thresholds; defaults follow the fixture notes (FORMATS.md) and common practice."""

    #: an episode ends after this long without its condition
    merge_gap_ns: int = setting(60 * S, check=positive)
    #: counters are compared with their value this long before
    window_ns: int = setting(60 * S, check=positive)
    #: corrected ECC errors per window that make an ECC storm (XID 92 is NVIDIA's own alarm)
    ecc_corrected_per_window: int = setting(50, check=positive)
    #: IB port error counts per window that make "errors climbing"
    ib_errors_per_window: int = setting(10, check=positive)
    #: PSI avg10 (percent of wall time) that counts as pressure
    psi_cpu_pct: float = 20.0
    #: memory stalls are rare on a healthy host: 5% of wall time is already reclaim at work
    psi_memory_pct: float = 5.0
    psi_io_pct: float = 20.0
    #: stolen CPU (percent) that counts as a noisy VM neighbour
    steal_pct: float = 10.0
    #: PCIe generation is compared only under load (it drops at idle to save power)
    load_util_pct: float = 50.0

    def __post_init__(self) -> None:
        validate(self, ConfigError)


#: IB port counters whose climbing is a cable/port problem (sysfs names)
IB_ERROR_COUNTERS = ("symbol_error", "port_rcv_errors", "link_downed", "link_error_recovery",
                     "local_link_integrity_errors", "port_rcv_remote_physical_errors")
_ECC_CORRECTED = ("ecc_sram_corr_vol", "ecc_dram_corr_vol", "ecc_corr_vol_total")
_ECC_UNCORRECTED = ("ecc_sram_unc_vol", "ecc_dram_unc_vol", "ecc_unc_vol_total")


def clock(t_ns: int) -> str:
    """``16:58:04`` (UTC) of a time in ns."""
    return time.strftime("%H:%M:%S", time.gmtime(t_ns / 1e9))


@dataclass
class _Counter:
    history: deque[tuple[int, float]] = field(default_factory=deque)


class HealthRules:
    """Feed health records with :meth:`add`; :meth:`findings` are the episodes so far."""

    def __init__(self, config: RuleConfig | None = None) -> None:
        self.config = config or RuleConfig()
        self._open: dict[tuple[str, str], Finding] = {}
        self._done: list[Finding] = []
        self._counters: dict[tuple[str, str], _Counter] = {}
        # PCIe link per GPU: the best it trained to while watched, and what it shows now
        self._pcie_best: dict[str, tuple[float, float]] = {}
        self._pcie_now: dict[str, tuple[float, float, float, float]] = {}

    def add_all(self, records: Iterable[HealthRecord]) -> HealthRules:
        for r in sorted(records, key=lambda r: r.t_ns):
            self.add(r)
        return self

    def findings(self) -> list[Finding]:
        """Every episode, closed and open, in order of first seen."""
        return sorted([*self._done, *self._open.values()], key=lambda f: (f.first_ns, f.target))

    def hard_findings(self) -> list[Finding]:
        return [f for f in self.findings() if f.hard]

    # ----- dispatch ---------------------------------------------------------------------------
    def add(self, r: HealthRecord) -> None:
        if r.event:
            self._event(r)
            return
        v = r.values
        if "/gpu" in r.target or r.reasons or "sm_clock_mhz" in v or "temp_c" in v:
            self._gpu(r)
        if "up" in v or any(c in v for c in IB_ERROR_COUNTERS):
            self._nic(r)
        if any(k.startswith(("psi_", "cpu_steal")) for k in v):
            self._host(r)

    # ----- episodes ---------------------------------------------------------------------------
    def _hit(self, r: HealthRecord, kind: str, *, severity: str, hard: bool, summary: str,
             action: str, evidence: dict[str, Any]) -> None:
        key = (kind, r.target)
        f = self._open.get(key)
        if f is not None and r.t_ns - f.last_ns > self.config.merge_gap_ns:
            self._done.append(self._open.pop(key))
            f = None
        if f is None:
            self._open[key] = Finding(kind, r.target, r.host, r.t_ns, r.t_ns, severity, hard,
                                      summary, action, dict(evidence))
            return
        f.last_ns = max(f.last_ns, r.t_ns)
        f.evidence.update(evidence)
        f.evidence["samples"] = f.evidence.get("samples", 1) + 1
        if _RANK[severity] > _RANK[f.severity] or (hard and not f.hard):
            # the episode got worse (corrected ECC errors, then uncorrectable ones): say so
            f.severity, f.hard, f.summary, f.action = severity, f.hard or hard, summary, action

    def _climb(self, r: HealthRecord, name: str) -> float | None:
        """How much counter ``name`` of ``r.target`` rose over the last window; None until there
        is an earlier value (a counter reset, e.g. a driver reload, starts over)."""
        value = r.values.get(name)
        if value is None:
            return None
        c = self._counters.setdefault((r.target, name), _Counter())
        h = c.history
        if h and value < h[-1][1]:
            h.clear()
        h.append((r.t_ns, value))
        while len(h) > 1 and r.t_ns - h[1][0] >= self.config.window_ns:
            h.popleft()
        return value - h[0][1] if len(h) > 1 else None

    # ----- GPUs -------------------------------------------------------------------------------
    def _gpu(self, r: HealthRecord) -> None:
        v, cfg = r.values, self.config
        slow = SLOWDOWN_REASONS & set(r.reasons)
        clocks = ""
        if "sm_clock_mhz" in v:
            clocks = f", SM clock {v['sm_clock_mhz']:,.0f} MHz"
            if "sm_clock_max_mhz" in v:
                clocks += f" of {v['sm_clock_max_mhz']:,.0f} MHz max"
        temp = f", {v['temp_c']:.0f} °C" if "temp_c" in v else ""
        ev = {k: v[k] for k in ("sm_clock_mhz", "sm_clock_max_mhz", "temp_c", "power_w")
              if k in v}
        thermal = slow & {"hw_thermal_slowdown", "sw_thermal_slowdown"}
        if thermal or ("hw_slowdown" in slow and "hw_power_brake" not in slow):
            what = "HW thermal slowdown" if "hw_thermal_slowdown" in thermal else \
                "SW thermal slowdown" if thermal else "HW slowdown"
            self._hit(r, "thermal_slowdown", severity="warning", hard=False,
                      summary=f"{what} since {clock(r.t_ns)}{clocks}{temp}",
                      action="check the GPU's cooling (fans, airflow, inlet temperature)",
                      evidence={**ev, "reasons": sorted(slow)})
        if "hw_power_brake" in slow:
            self._hit(r, "power_brake", severity="warning", hard=False,
                      summary=f"HW power brake slowdown since {clock(r.t_ns)}{clocks}",
                      action="check the node's power supplies and power capping",
                      evidence={**ev, "reasons": sorted(slow)})
        width, width_max = v.get("pcie_width"), v.get("pcie_width_max")
        gen, gen_max = v.get("pcie_gen"), v.get("pcie_gen_max")
        loaded = v.get("util_pct", 0.0) >= cfg.load_util_pct
        if self._downtrained(r.target, width, width_max, gen if loaded else None, gen_max):
            self._hit(r, "pcie_downtrain", severity="warning", hard=True,
                      summary=f"PCIe link trained down to Gen{gen or 0:.0f} x{width or 0:.0f} "
                              f"(max Gen{gen_max or 0:.0f} x{width_max or 0:.0f})",
                      action="reseat the GPU / riser and check the slot; reboot to retrain",
                      evidence={"pcie_gen": gen, "pcie_gen_max": gen_max, "pcie_width": width,
                                "pcie_width_max": width_max})
        if v.get("remap_failure") == 1:
            self._hit(r, "remap_failure", severity="critical", hard=True,
                      summary="row remapping failed: the GPU has no spare rows left in a bank",
                      action="drain the GPU and reset it; replace it (RMA) if it repeats",
                      evidence={"remap_unc": v.get("remap_unc"), "remap_corr": v.get("remap_corr")})
        elif v.get("remap_pending") == 1:
            self._hit(r, "remap_pending", severity="warning", hard=True,
                      summary="a row remap is pending: it takes effect at the next GPU reset",
                      action="reset the GPU at a convenient time (after the job or at a "
                             "checkpoint)",
                      evidence={"remap_unc": v.get("remap_unc"), "remap_corr": v.get("remap_corr")})
        if v.get("reset_required") == 1:
            self._hit(r, "reset_required", severity="critical", hard=True,
                      summary="the driver says the GPU needs a reset",
                      action=action_text("RESET_GPU"), evidence={})
        corrected = sum(d for n in _ECC_CORRECTED if (d := self._climb(r, n)) is not None)
        uncorrected = sum(d for n in _ECC_UNCORRECTED if (d := self._climb(r, n)) is not None)
        if uncorrected > 0:
            self._hit(r, "ecc_storm", severity="critical", hard=True,
                      summary=f"{uncorrected:.0f} uncorrectable ECC errors in the last "
                              f"{cfg.window_ns / S:.0f} s",
                      action=action_text("WORKFLOW_XID_48"),
                      evidence={"uncorrected": uncorrected, "corrected": corrected})
        elif corrected >= cfg.ecc_corrected_per_window:
            self._hit(r, "ecc_storm", severity="warning", hard=False,
                      summary=f"{corrected:.0f} corrected ECC errors in the last "
                              f"{cfg.window_ns / S:.0f} s",
                      action="watch the GPU; drain it if errors keep climbing or XID 48/94/95 "
                             "follows",
                      evidence={"corrected": corrected})

    def _downtrained(self, target: str, width: float | None, width_max: float | None,
                     gen: float | None, gen_max: float | None) -> bool:
        """A link below its maximum *and* below what it trained to before or what its peers
        (GPUs of the same maximum) run at. Parts in a narrower slot (an A10G or T4 at x8 of x16
        from the start, like all its peers) are how the node was built, not a fault; the
        generation is only compared under load, since it drops at idle to save power."""
        if width is None or width_max is None:
            return False
        g = gen if gen is not None else -1.0
        best_w, best_g = self._pcie_best.get(target, (width, g))
        self._pcie_best[target] = (max(best_w, width), max(best_g, g))
        self._pcie_now[target] = (width, width_max, g, gen_max or -1.0)
        peers = [(w, gm_, gg) for t, (w, wm, gg, gm_) in self._pcie_now.items()
                 if t != target and wm == width_max]
        narrow = width < width_max and (width < best_w or any(w > width for w, _, _ in peers))
        slow = gen is not None and gen_max is not None and gen < gen_max and (
            gen < best_g or any(gg > gen for _, _, gg in peers))
        return narrow or slow

    # ----- NICs -------------------------------------------------------------------------------
    def _nic(self, r: HealthRecord) -> None:
        v, cfg = r.values, self.config
        if v.get("up") == 0:
            self._hit(r, "port_down", severity="critical", hard=True,
                      summary=f"port down since {clock(r.t_ns)}",
                      action="check the cable and the switch port; replace the cable if it "
                             "flaps", evidence={})
        rises = {n: d for n in IB_ERROR_COUNTERS if (d := self._climb(r, n)) is not None and d > 0}
        if rises.get("link_downed", 0) > 0 or sum(rises.values()) >= cfg.ib_errors_per_window:
            what = ", ".join(f"{n} +{d:.0f}" for n, d in sorted(rises.items()))
            self._hit(r, "ib_errors", severity="warning", hard=True,
                      summary=f"port error counters climbing ({what} in "
                              f"{cfg.window_ns / S:.0f} s)",
                      action="check the cable and transceiver (symbol errors point at the "
                             "physical link); swap the cable if they keep climbing",
                      evidence={"rises": rises})

    # ----- hosts ------------------------------------------------------------------------------
    def _host(self, r: HealthRecord) -> None:
        v, cfg = r.values, self.config
        for kind, name, limit, what in (
                ("cpu_pressure", "psi_cpu_some_avg10", cfg.psi_cpu_pct, "CPU"),
                ("memory_pressure", "psi_memory_some_avg10", cfg.psi_memory_pct, "memory"),
                ("io_pressure", "psi_io_full_avg10", cfg.psi_io_pct, "I/O")):
            if v.get(name, 0.0) >= limit:
                self._hit(r, kind, severity="warning", hard=False,
                          summary=f"{what} pressure: tasks stalled {v[name]:.0f}% of the last "
                                  f"10 s (PSI) since {clock(r.t_ns)}",
                          action=f"find what else runs on the host ({what} contention from a "
                                 "neighbour) and move it or the job",
                          evidence={name: v[name]})
        if v.get("cpu_steal_pct", 0.0) >= cfg.steal_pct:
            self._hit(r, "cpu_steal", severity="warning", hard=False,
                      summary=f"hypervisor steals {v['cpu_steal_pct']:.0f}% of CPU time",
                      action="move the job off this VM host or ask for dedicated cores",
                      evidence={"cpu_steal_pct": v["cpu_steal_pct"]})

    # ----- events -----------------------------------------------------------------------------
    def _event(self, r: HealthRecord) -> None:
        if r.event == "xid" and r.code is not None:
            info = xid_info(r.code)
            action = action_text(info.action)
            if r.code == 154 and (stated := action_of_154(r.text)):
                action = stated
            self._hit(r, "xid" if info.hardware else "xid_app", severity=info.severity
                      if info.hardware else "info", hard=info.hardware,
                      summary=f"XID {r.code} at {clock(r.t_ns)}: {info.meaning}",
                      action=action, evidence={"xid": r.code, "text": r.text,
                                               "bucket": info.action})
        elif r.event == "gpu_off_bus":
            self._hit(r, "gpu_off_bus", severity="critical", hard=True,
                      summary=f"GPU fell off the bus at {clock(r.t_ns)}",
                      action=action_text("RESTART_BM"), evidence={"text": r.text})
        elif r.event == "aer" and "Uncorrectable" in r.text:
            fatal = "Fatal" in r.text and "Non-Fatal" not in r.text
            self._hit(r, "pcie_aer", severity="critical" if fatal else "warning", hard=True,
                      summary=f"PCIe uncorrectable error at {clock(r.t_ns)}: {r.text}",
                      action="drain the node and check the PCIe device and slot",
                      evidence={"text": r.text})
        elif r.event == "ib_link" and r.text == "down":
            self._hit(r, "port_down", severity="critical", hard=True,
                      summary=f"link went down at {clock(r.t_ns)} (kernel)",
                      action="check the cable and the switch port", evidence={"text": r.text})
        elif r.event == "ib_module" and r.code is not None:
            self._hit(r, "port_down", severity="warning", hard=True,
                      summary=f"NIC cable/module event at {clock(r.t_ns)}: {r.text}",
                      action="check or replace the cable/transceiver", evidence={"text": r.text})
        elif r.event == "dcgm_diag":
            failed = r.text.endswith(": Fail") or r.text.startswith("Error:")
            self._hit(r, "dcgm_diag", severity="warning", hard=failed,
                      summary=f"DCGM diagnostic: {r.text}",
                      action="drain the GPU and run dcgmi diag -r 3 on it; replace it if the "
                             "test fails again" if failed else "read the DCGM warning; act if "
                             "it repeats", evidence={"text": r.text})
        elif r.event == "oom":
            self._hit(r, "oom", severity="warning", hard=False,
                      summary=f"the kernel's OOM killer ran at {clock(r.t_ns)}",
                      action="find what used the memory; give the job more or its neighbours "
                             "less", evidence={"text": r.text})
