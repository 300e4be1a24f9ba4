"""Confirmation before isolation: the callable the recovery controller runs (when its policy
requires confirmation) to probe a suspect node against healthy peers of the same job."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from c4.report import FaultReport
from diagnosis.probes.api import ProbeHost, Prober
from diagnosis.probes.plans import CONFIRMED, PlanConfig, Verdict, pairwise

if TYPE_CHECKING:
    from c4.topology import Topology

log = logging.getLogger(__name__)


@dataclass
class ProbeConfirmer:
    """``confirmer(node, report, placement) -> (confirmed, note)``: the pairwise plan between
    ``node`` and up to ``peers`` other nodes of the job (``placement.nodes``, sorted, those
    named by the report's suspects last); ``note`` is the verdict's reason, for the decision
    record. ``resolve`` turns a node name into a :class:`ProbeHost`."""

    prober: Prober
    resolve: Callable[[str], ProbeHost]
    peers: int = 2
    config: PlanConfig = field(default_factory=PlanConfig)
    topology: Topology | None = None
    verdicts: list[Verdict] = field(default_factory=list)  # every verdict given, for reports

    def __call__(self, node: str, report: FaultReport, placement: Any) -> tuple[bool, str]:
        named = {s.id.split("/", 1)[0] for s in report.suspects}
        others = sorted((n for n in getattr(placement, "nodes", ()) if n != node),
                        key=lambda n: (n in named, n))
        if not others:
            return False, f"no other node of job {report.job} to probe {node} against"
        verdict = pairwise(self.prober, self.resolve(node),
                           [self.resolve(n) for n in others[:self.peers]],
                           config=self.config, topology=self.topology)
        self.verdicts.append(verdict)
        log.info("probe of %s for fault %s: %s (%s)", node, report.id, verdict.status,
                 verdict.reason)
        return verdict.status == CONFIRMED, f"{self.prober.name} {verdict.status}: " \
                                            f"{verdict.reason}"
