"""Rules on hard evidence, fed with records built from the recorded fixtures."""

from __future__ import annotations

import dataclasses

from c4.proto.health import HealthRecord
from collectors.health.host import parse_psi
from collectors.health.infiniband import read_ib_sysfs
from collectors.health.kernel import parse_kernel_log
from collectors.health.records import event_record, gpu_record, host_record, ib_record
from collectors.health.smi_text import parse_smi_text
from collectors.health.smi_xml import parse_smi_xml
from diagnosis.health.causes import health_reports
from diagnosis.health.rules import HealthRules
from tests.collectors.health.fixtures import health, text

S = 1_000_000_000
T0 = 1_700_000_000 * S


def test_clean_h100_gives_nothing() -> None:
    [g] = parse_smi_text(text("nvidia_smi_q_h100_driver560_della.txt"))
    rules = HealthRules().add_all(gpu_record("n1", "n1/gpu0", T0 + i * 5 * S, g)
                                  for i in range(20))
    assert rules.findings() == []


def test_a100_remap_pending_is_a_hard_finding_and_a_health_report() -> None:
    [g] = parse_smi_text(text("nvidia_smi_q_a100_xid63_remapped_rows_excerpt.txt"))
    [f] = HealthRules().add_all([gpu_record("n1", "n1/gpu3", T0, g)]).findings()
    assert (f.kind, f.hard, f.severity, f.target) == ("remap_pending", True, "warning", "n1/gpu3")
    assert "reset the GPU at a convenient time" in f.action
    [rep] = health_reports([f], job="j")
    assert rep.kind == "health" and rep.suspects[0].id == "n1/gpu3"
    assert rep.suspects[0].type == "gpu" and rep.evidence["finding"] == "remap_pending"


def test_xid_catalog_meaning_and_action() -> None:
    events = parse_kernel_log(text("kernel_dmesg_T_xid119_gsp_timeout.log"))
    recs = [r for i, e in enumerate(events)
            if (r := event_record("n1", "n1/gpu4", T0 + i * S, e)) is not None]
    [f] = HealthRules().add_all(recs).findings()
    assert (f.kind, f.severity, f.hard) == ("xid", "critical", True)
    assert "GSP RPC timeout" in f.summary and "reset it" in f.action
    assert f.evidence["samples"] == 5
    app = parse_kernel_log(text("kernel_dmesg_decode_iso_xid13_xid43_oom.log"))
    recs = [r for i, e in enumerate(app) if (r := event_record("n1", "n1/gpu0", T0 + i, e))]
    kinds = {(f.kind, f.hard) for f in HealthRules().add_all(recs).findings()}
    assert kinds == {("xid_app", False), ("oom", False)}   # 13/43 are application errors


def test_xid79_and_unknown_xid() -> None:
    recs = [HealthRecord("n1", T0, "n1/gpu0", event="xid", code=79, text="fallen off the bus"),
            HealthRecord("n1", T0, "n1/gpu1", event="xid", code=999, text="new")]
    f79, f999 = HealthRules().add_all(recs).findings()
    assert f79.severity == "critical" and "reboot" in f79.action
    assert f999.hard and "not in c4's catalog" in f999.summary


def test_ib_counters_only_climbing_counts() -> None:
    ports = read_ib_sysfs(health("sysfs_class_infiniband_h100"))
    p1 = ports[1]                              # link_downed 255 since boot: not news
    rules = HealthRules()
    rules.add(ib_record("n1", "n1/nic1", T0, p1))
    rules.add(ib_record("n1", "n1/nic1", T0 + 5 * S, p1))
    assert rules.findings() == []
    worse = dataclasses.replace(p1, counters={**p1.counters, "link_downed": 256,
                                              "symbol_error": 40})
    rules.add(ib_record("n1", "n1/nic1", T0 + 10 * S, worse))
    [f] = rules.findings()
    assert f.kind == "ib_errors" and f.evidence["rises"] == {"link_downed": 1, "symbol_error": 40}
    down = dataclasses.replace(p1, state="DOWN")
    rules.add(ib_record("n1", "n1/nic1", T0 + 15 * S, down))
    assert {f.kind for f in rules.findings()} == {"ib_errors", "port_down"}


def test_pcie_x8_from_the_start_like_its_peers_is_not_downtraining() -> None:
    [t4] = parse_smi_xml(health("nvidia_smi_q_x_tesla_t4_driver515_v11.xml").read_bytes())
    assert (t4.values["pcie_width"], t4.values["pcie_width_max"]) == (8, 16)
    rules = HealthRules().add_all(gpu_record("n1", f"n1/gpu{i}", T0, t4) for i in range(4))
    assert rules.findings() == []
    [h100] = parse_smi_text(text("nvidia_smi_q_h100_driver560_della.txt"))
    x8 = dataclasses.replace(h100, values={**h100.values, "pcie_width": 8})
    rules = HealthRules()
    for i in range(4):
        rules.add(gpu_record("n1", f"n1/gpu{i}", T0, h100))
    rules.add(gpu_record("n1", "n1/gpu2", T0 + 5 * S, x8))
    [f] = rules.findings()
    assert (f.kind, f.target, f.hard) == ("pcie_downtrain", "n1/gpu2", True)
    assert "x8" in f.summary and "x16" in f.summary


def test_psi_pressure_from_the_file_shapes() -> None:
    psi = {"cpu": parse_psi(text("psi_proc_pressure_cpu_synthetic")),
           "memory": parse_psi(text("psi_cgroup2_memory.pressure"))}
    rec = host_record("n1", T0, psi, steal_pct=0.5)
    assert rec.values == {"psi_cpu_some_avg10": 10.0, "psi_memory_some_avg10": 0.0,
                          "psi_memory_full_avg10": 0.0, "cpu_steal_pct": 0.5}
    assert HealthRules().add_all([rec]).findings() == []      # 10% is under the 20% line
    busy = HealthRecord("n1", T0, values={"psi_cpu_some_avg10": 63.0})
    [f] = HealthRules().add_all([busy]).findings()
    assert (f.kind, f.target, f.hard) == ("cpu_pressure", "n1", False)


def test_thermal_episode_extends_then_splits() -> None:
    hot = {"sm_clock_mhz": 1110.0, "sm_clock_max_mhz": 1980.0, "temp_c": 91.0}
    recs = [HealthRecord("n1", T0 + i * 5 * S, "n1/gpu3", hot, ("hw_thermal_slowdown",))
            for i in range(6)]
    recs.append(HealthRecord("n1", T0 + 500 * S, "n1/gpu3", hot, ("hw_thermal_slowdown",)))
    a, b = HealthRules().add_all(recs).findings()
    assert (a.first_ns, a.last_ns, b.first_ns) == (T0, T0 + 25 * S, T0 + 500 * S)
    assert "HW thermal slowdown since" in a.summary and "1,110 MHz of 1,980 MHz" in a.summary
    assert not a.hard


def test_ecc_corrected_storm_and_uncorrected() -> None:
    recs = [HealthRecord("n1", T0 + i * 10 * S, "n1/gpu0", {"ecc_dram_corr_vol": 30.0 * i})
            for i in range(4)]
    [f] = HealthRules().add_all(recs).findings()
    assert f.kind == "ecc_storm" and not f.hard and f.evidence["corrected"] >= 50
    recs.append(HealthRecord("n1", T0 + 45 * S, "n1/gpu0", {"ecc_dram_unc_vol": 0.0}))
    recs.append(HealthRecord("n1", T0 + 50 * S, "n1/gpu0", {"ecc_dram_unc_vol": 2.0}))
    [f] = HealthRules().add_all(recs).findings()
    assert f.severity == "critical" and f.hard
