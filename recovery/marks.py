"""The recoveries of a job as the HTML report draws them (``c4 report --html --journal``)."""

from __future__ import annotations

from pathlib import Path

from diagnosis.report_html.data import RecoveryMarks
from recovery.errors import RecoveryError
from recovery.journal import Journal
from recovery.timeline import timeline


def recovery_marks(path: Path, job: str) -> list[RecoveryMarks]:
    """Each recovery of ``job`` in the journal at ``path``: node, final state, phase times."""
    if not path.exists():
        raise RecoveryError(f"no recovery journal at {path}: give the file `c4 recover` "
                            "writes (C4_RECOVERY_JOURNAL)")
    with Journal(path) as j:
        return [RecoveryMarks(r.id, r.node, r.state.value, dict(timeline(j, r).at))
                for r in j.recoveries(job)]
