"""Active probes of the fabric: the nccl-tests parser and wrapper, a torch/gloo probe with the
same interface, probe plans (pairwise, bisection) and how their verdicts re-score fault
reports. Neither torch nor networkx is imported here (the gloo ranks import torch in their own
processes)."""

from __future__ import annotations

from diagnosis.probes.adjust import apply_probes, host_of_suspect
from diagnosis.probes.api import ProbeError, ProbeHost, Prober, ProbeResult
from diagnosis.probes.nccl_tests import (
    load_nccl_tests,
    parse_nccl_tests,
    parse_nccl_tests_run,
)
from diagnosis.probes.nccl_tests_records import Device, Measurement, NcclTestsRun, SizeResult
from diagnosis.probes.plans import (
    CLEARED,
    CONFIRMED,
    INCONCLUSIVE,
    BisectOutcome,
    PlanConfig,
    Verdict,
    bisect,
    expected_busbw,
    pairwise,
)

__all__ = ["CLEARED", "CONFIRMED", "INCONCLUSIVE", "BisectOutcome", "Device", "Measurement",
           "NcclTestsRun", "PlanConfig", "ProbeError", "ProbeHost", "ProbeResult", "Prober",
           "SizeResult", "Verdict", "apply_probes", "bisect", "expected_busbw",
           "host_of_suspect", "load_nccl_tests", "pairwise", "parse_nccl_tests",
           "parse_nccl_tests_run"]
