"""c4 health records: recorded tool output as health trace lines, read back by the trace
reader and judged by the rules (dcgmi diag failures included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from c4.proto.health import HealthRecord
from diagnosis.health.rules import HealthRules
from diagnosis.trace.reader import read_trace
from tests.collectors.health.fixtures import health


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "c4", "health", "records", *args],
                          capture_output=True, text=True, timeout=120)


def test_recorded_outputs_become_a_readable_health_trace(tmp_path: Path) -> None:
    out = tmp_path / "health.jsonl"
    lines = []
    for source, name in (("kernel", "kernel_dmesg_T_xid119_gsp_timeout.log"),
                         ("dcgmi-diag", "dcgmi_diag_r2_memory_fail_thermal_warning_excerpt.txt"),
                         ("smi-xml", "nvidia_smi_q_x_a10g_driver515_v11_remapped_rows.xml"),
                         ("ib-sysfs", "sysfs_class_infiniband_h100")):
        done = _run(source, str(health(name)), "--host", "n1", "--t-ns", "1000",
                    "--gpu-map", "0000:9b:00=n1/gpu4,0000:00:1e=n1/gpu3",
                    "--nic-map", "mlx5_0/1=n1/nic0")
        assert done.returncode == 0, done.stderr
        lines.append(done.stdout)
    out.write_text("".join(lines))
    recs = [i for i in read_trace(out) if isinstance(i, HealthRecord)]
    assert {r.component for r in recs if r.event == "xid"} == {"n1/gpu4"}
    assert any(r.component == "n1/gpu3" and r.values["remap_banks_max"] == 192 for r in recs)
    assert {r.component for r in recs if not r.event and "up" in r.values} == {
        "n1/nic0", "n1/mlx5_1/1", "n1/mlx5_bond_0/1"}
    kinds = {(f.kind, f.target, f.hard) for f in HealthRules().add_all(recs).findings()}
    assert ("xid", "n1/gpu4", True) in kinds
    assert ("dcgm_diag", "n1/gpu0", True) in kinds        # GPU Memory: Fail - GPU: 0
    assert ("dcgm_diag", "n1", False) in kinds            # the thermal warning


def test_bad_input_is_named() -> None:
    done = _run("smi-xml", str(health("psi_cgroup2_cpu.pressure")), "--host", "n1")
    assert done.returncode == 2 and "not well-formed XML" in done.stderr
    done = _run("nvml", str(health("psi_cgroup2_cpu.pressure")), "--host", "n1")
    assert done.returncode == 2 and "not one of" in done.stderr
