"""Active probes of the fabric and their parsers (nccl-tests today)."""

from __future__ import annotations

from diagnosis.probes.nccl_tests import (
    load_nccl_tests,
    parse_nccl_tests,
    parse_nccl_tests_run,
)
from diagnosis.probes.nccl_tests_records import Device, Measurement, NcclTestsRun, SizeResult

__all__ = ["Device", "Measurement", "NcclTestsRun", "SizeResult", "load_nccl_tests",
           "parse_nccl_tests", "parse_nccl_tests_run"]
