"""The engine's one reporter: identity across revisions, ends with a reason, one report per
incident whichever detector found it, and new incidents after an end."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import OP_COLUMNS, Columns
from c4.report import Suspect
from diagnosis.engine import Engine, EngineConfig
from diagnosis.engine.reporter import Finding, Reporter

NIC = (Suspect("nic", "node001/nic0", 1.0),)


def _finding(kind: str, key: str, onset: int, summary: str = "s", **typed) -> Finding:
    return Finding(kind, key, NIC, onset, summary, **typed)


def test_a_revised_finding_keeps_its_id_and_bumps_the_revision():
    rep = Reporter()
    assert rep.file(_finding("comm_hang", "h", 100), now=100) == "h"
    assert [r.revision for r in rep.changed()] == [0]
    assert rep.file(_finding("comm_hang", "h", 100, "more"), now=200) == "h"
    [r] = rep.changed()
    assert (r.id, r.revision, r.summary, r.last_seen_ns, r.state) == ("h", 1, "more", 200, "open")


def test_an_unchanged_finding_is_no_new_revision():
    rep = Reporter()
    rep.file(_finding("comm_slow", "s", 100), now=100)
    rep.changed()
    rep.file(_finding("comm_slow", "s", 100), now=300)
    assert rep.changed() == []
    assert (rep.get("s").revision, rep.get("s").last_seen_ns) == (0, 300)


def test_earlier_evidence_moves_the_onset_back_as_a_revision():
    rep = Reporter()
    rep.file(_finding("noncomm_slow", "s", 500), now=600)
    rep.changed()
    rep.file(_finding("noncomm_slow", "s", 200), now=700)
    [r] = rep.changed()
    assert (r.first_seen_ns, r.revision) == (200, 1)
    # a later pass whose window no longer holds the start does not move it forward
    rep.file(_finding("noncomm_slow", "s", 450), now=800)
    assert rep.get("s").first_seen_ns == 200


def test_a_finding_that_disappears_ends_with_its_reason():
    rep = Reporter()
    rep.file(_finding("comm_hang", "h", 100), now=100)
    rep.file(_finding("noncomm_slow", "s", 100), now=100)
    rep.resolve("h", now=150, why="the waiting call finished", cleared=True)
    rep.resolve("s", now=150, why="later passes no longer find it slow")
    h, s = rep.get("h"), rep.get("s")
    assert (h.state, h.evidence["resolved"], h.evidence["cleared"], h.last_seen_ns) == \
        ("resolved", "the waiting call finished", True, 150)
    assert (s.state, s.evidence["resolved"]) == ("resolved", "later passes no longer find it slow")
    assert "cleared" not in s.evidence
    assert (rep.filed("h").resolution, rep.filed("h").cleared) == \
        ("the waiting call finished", True)
    # the post-mortem lists what happened and ended, not what was withdrawn
    assert [r.id for r in rep.incidents()] == ["h"]
    # resolving an ended report again changes nothing
    rep.changed()
    rep.resolve("h", now=300, why="again")
    assert rep.changed() == [] and rep.get("h").evidence["resolved"] == "the waiting call finished"


def test_the_same_incident_seen_by_two_detectors_is_one_report():
    rep = Reporter()
    # the live scan blames rank 3 while its peers wait ...
    live = rep.file(_finding("noncomm_hang", "noncomm_hang:3", 100, culprits=(3,)), now=100)
    # ... and the call times out, failing the waiters, which names ranks 3 and 5
    timed = rep.file(_finding("noncomm_hang", "noncomm_hang:3,5", 90, "timed out",
                              culprits=(3, 5), timed_out=True), now=400)
    assert live == timed == "noncomm_hang:3"
    [r] = rep.all()
    assert (r.revision, r.first_seen_ns, r.summary) == (1, 90, "timed out")
    assert rep.finding("noncomm_hang:3").culprits == (3, 5)
    # a hang that blames other ranks is another incident
    assert rep.file(_finding("noncomm_hang", "noncomm_hang:7", 500, culprits=(7,)),
                    now=500) == "noncomm_hang:7"


def test_a_hang_after_an_ended_one_is_a_new_incident_and_a_slow_fault_reopens():
    rep = Reporter()
    rep.file(_finding("comm_hang", "h", 100), now=100, renew=True)
    rep.resolve("h", now=150, why="the waiting call finished", cleared=True)
    assert rep.file(_finding("comm_hang", "h", 900), now=900, renew=True) == "h#2"
    assert (rep.get("h").id, rep.get("h").revision) == ("h#2", 0)
    assert [r.state for r in rep.all()] == ["resolved", "open"]
    rep.resolve("h", now=1100, why="the waiting call finished")   # the key reaches the latest
    assert rep.get("h#2").state == "resolved"
    assert rep.file(_finding("comm_hang", "h", 2000), now=2000, renew=True) == "h#3"

    rep.file(_finding("comm_slow", "s", 100), now=100)
    rep.resolve("s", now=150, why="back to baseline", cleared=True)
    assert rep.file(_finding("comm_slow", "s", 900), now=900) == "s"
    r = rep.get("s")
    assert (r.state, r.first_seen_ns, r.revision) == ("open", 100, 2)


MS = 1_000_000
STRINGS = ["g", "all_reduce", ""]     # pg name, op name, dtype


def _cols(rows: list[tuple[int, int, int, int]]) -> Columns:
    """Op rows (rank, seq, enter, end) of all_reduce on "g"."""
    full = [(rank, 0, seq, 1, 1024, 2, enter, -1, end, 0, -1) for rank, seq, enter, end in rows]
    return Columns({k: np.array([row[i] for row in full], dtype=dt)
                    for i, (k, dt) in enumerate(OP_COLUMNS.items())}, STRINGS)


def test_a_stall_seen_live_and_after_the_fact_is_one_report():
    """Rank 2 stays away from a call for 5 s: the live scan files the hang while its peers
    wait; when the call then completes, the after-the-fact judge sees the same stall in the
    finished rows. One incident, cleared, from its onset."""
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS, evidence_delay_ns=1_000 * MS))
    for r in range(4):
        eng.add_rank(r, f"h{r // 2}", f"h{r // 2}/gpu{r % 2}")
    eng.add_group("g", range(4))
    t = 0
    for seq in range(30):
        t += 10 * MS
        eng.add_ops(_cols([(r, seq, t + r, t + 2 * MS) for r in range(4)]))
        eng.advance(t)
    t += 10 * MS
    eng.add_ops(_cols([(r, 30, t + r, -1) for r in (0, 1, 3)]))
    for k in range(1, 60):
        eng.advance(t + k * 50 * MS)
    [live] = [r for r in eng.reports() if r.kind == "noncomm_hang"]
    assert live.state == "open" and live.evidence["culprits"] == [2]
    done = t + 5_000 * MS
    eng.add_ops(_cols([(r, 30, t + r if r != 2 else done - MS, done) for r in range(4)]))
    eng.advance(done + 100 * MS)
    [hang] = [r for r in eng.reports() if r.kind == "noncomm_hang"]
    assert hang.id == live.id and hang.state == "resolved" and hang.evidence.get("cleared")
    assert hang.first_seen_ns <= t + 3
