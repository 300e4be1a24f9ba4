"""PSI, /proc/stat steal, AER sysfs counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.health.errors import HealthParseError
from collectors.health.host import (
    CpuTimes,
    parse_aer_counters,
    parse_proc_stat,
    parse_psi,
    steal_fraction,
)
from tests.collectors.health.fixtures import text


def test_cgroup2_psi_files() -> None:
    cpu = parse_psi(text("psi_cgroup2_cpu.pressure"))
    assert (cpu.some.avg10, cpu.some.avg60, cpu.some.avg300, cpu.some.total_us) == (
        0.0, 0.08, 0.06, 293391454)
    assert cpu.full.total_us == 277111656 and cpu.full.avg300 == 0.05
    assert parse_psi(text("psi_cgroup2_memory.pressure")).full.total_us == 250662
    assert parse_psi(text("psi_cgroup2_io.pressure")).some.total_us == 185162400


def test_proc_pressure_shapes() -> None:
    cpu = parse_psi(text("psi_proc_pressure_cpu_synthetic"))
    assert (cpu.some.avg10, cpu.some.avg60, cpu.some.avg300, cpu.some.total_us) == (
        10.0, 60.0, 300.0, 114514)
    assert cpu.full.total_us == 0  # system-level cpu "full" is always zero
    mem = parse_psi(text("psi_proc_pressure_memory_synthetic"))
    assert (mem.full.avg10, mem.full.total_us) == (1.0, 11451)


def test_psi_before_5_13_has_no_full_line_and_bad_lines_named() -> None:
    old = parse_psi("some avg10=1.50 avg60=0.00 avg300=0.00 total=12\n")
    assert old.full is None and old.some.avg10 == 1.5
    with pytest.raises(HealthParseError, match="p:2: expected"):
        parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=x\n", "p")
    with pytest.raises(HealthParseError, match="psi=0"):
        parse_psi("")


def test_proc_stat_steal() -> None:
    before = parse_proc_stat("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3 4\n")
    assert before == CpuTimes(100, 0, 50, 800, 10, 0, 5, 35)
    after = CpuTimes(150, 0, 60, 880, 10, 0, 5, 95)
    assert steal_fraction(before, after) == pytest.approx(60 / 200)
    assert steal_fraction(after, after) is None
    live = parse_proc_stat(Path("/proc/stat").read_text())
    assert live.total > 0 and live.steal >= 0


def test_aer_dev_correctable_counts() -> None:
    counts = parse_aer_counters(text("sysfs_pci_aer_dev_correctable_kernel_doc.txt"))
    assert counts["Receiver Error"] == 2 and counts["TOTAL_ERR_COR"] == 2
    assert counts["RELAY_NUM Rollover"] == 0 and len(counts) == 9
