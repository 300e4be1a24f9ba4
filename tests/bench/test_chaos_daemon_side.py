"""The daemon-side chaos scenarios run (bench/chaos/daemon_side.py): against a real daemon
process, a poison batch is refused and the other job's planted hang is reported in time."""

from __future__ import annotations

import pytest

from bench.chaos.daemon_side import poison_next_to_hang

pytestmark = [pytest.mark.network]


def test_poison_scenario_reports_the_other_jobs_hang_within_5_s(tmp_path):
    row = poison_next_to_hang(tmp_path)
    assert row.answer.startswith("INVALID_ARGUMENT") and "t_enter_ns" in row.answer
    assert "INVALID_ARGUMENT" in row.notes[0]
    assert row.report_s is not None and row.report_s <= 5.0, row
    assert row.daemon_mib > 0
