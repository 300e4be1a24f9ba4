"""The timeline of a recovery (recovery/timeline.py) from the journal's job events."""

from __future__ import annotations

from recovery.journal import Journal, State
from recovery.timeline import timeline

JOB = "job"
S = 10**9


def test_a_checkpoint_committed_during_the_stop_counts_for_the_work_lost(tmp_path):
    """The save of step 20 was in flight when the job was told to stop and finished in the
    grace before SIGKILL (its event comes after ``stopping``); the relaunch resumed from it.
    The work lost runs from that save's start to the stop (the training example's slow-host
    end-to-end run once showed this, and found no checkpoint)."""
    journal = Journal(tmp_path / "journal.db")
    t0 = 1_000 * S
    rec = journal.create_recovery(job=JOB, fault_id="f", node="node2", backend="blocklist",
                                  onset_ns=t0, report_ns=t0 + S, reason="test",
                                  now_ns=t0 + 2 * S)
    assert rec is not None
    for dst in (State.ISOLATING, State.ISOLATED):
        journal.transition(rec.id, dst, t_ns=t0 + 3 * S)
    journal.add_event(JOB, "stopping", attempt=0, step=24, t_ns=t0 + 4 * S)
    journal.add_event(JOB, "checkpoint", attempt=0, step=20, t_ns=t0 + 5 * S,
                      data={"saved_ns": t0 + S, "path": "ckpt"})
    journal.add_event(JOB, "stopped", attempt=0, step=24, t_ns=t0 + 6 * S)
    journal.add_event(JOB, "launched", attempt=1, t_ns=t0 + 7 * S)
    journal.add_event(JOB, "first_step", attempt=1, step=20, t_ns=t0 + 9 * S)
    tl = timeline(journal, journal.recovery(rec.id))
    assert tl.resumed_step == 20 and tl.lost_steps == 5
    assert tl.lost_work_s == 3.0
