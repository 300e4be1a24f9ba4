"""The hard-cases bench (bench/accuracy/hard.py): its scenarios, how it counts occurrences, and
a small run end to end."""

from __future__ import annotations

import json

import numpy as np

from bench.accuracy.hard import KINDS, PATTERNS, _apart, main, occurrences, scenarios


def test_five_seeds_give_every_kind_every_pattern():
    todo = scenarios([512], 5, "rail", ("intermittent",))
    assert len(todo) == 5 * len(KINDS)
    for kind in KINDS:
        mine = [sc.cfg.faults[0] for sc in todo if sc.label == f"int {kind}"]
        seen = {"random" if f.duty else (f.every, f.on) for f in mine}
        assert seen == set(PATTERNS)
        assert all(2.0 <= f.slow <= 4.0 and f.onset >= 6 for f in mine)


def test_faults_from_the_start_and_several_at_once():
    todo = scenarios([512], 1, "tor", ("start", "multi", "healthy"))
    labels = [sc.label for sc in todo]
    assert labels == [f"start {k}" for k in KINDS] + ["multi2", "multi3", "healthy",
                                                      "healthy ecmp"]
    for sc in todo[:len(KINDS)]:
        assert [f.onset for f in sc.cfg.faults] == [0]
    for sc, n in ((todo[len(KINDS)], 2), (todo[len(KINDS) + 1], 3)):
        kinds = [f.kind for f in sc.cfg.faults]
        assert len(kinds) == n == len(set(kinds))
        assert _apart(sc.cfg)
    # mid-run, from the start, one in three
    three = todo[len(KINDS) + 1].cfg.faults
    assert three[0].onset > 0 and not three[0].every and three[1].onset == 0
    assert (three[2].every, three[2].on) == (3, 1)
    healthy = todo[-1].cfg
    assert healthy.hosts_per_leaf == 4 and healthy.checkpoint_every == 7 and not healthy.faults


def test_occurrences_count_the_active_iterations_until_the_report():
    every = {"onset_iteration": 10, "intermittent": {"every": 3, "on": 1}}
    assert occurrences(every, 0) == 1
    assert occurrences(every, 6) == 3         # 10, 13, 16
    assert occurrences(every, 8) == 3
    duty = {"onset_iteration": 5, "intermittent": {"duty": 0.3, "active": [5, 6, 9, 14]}}
    assert occurrences(duty, 4) == 3
    assert occurrences({"onset_iteration": 2, "intermittent": None}, 3) == 4
    assert occurrences(every, None) is None


def test_a_small_run_prints_its_table(tmp_path, capsys):
    out = tmp_path / "hard.json"
    assert main(["--gpus", "64", "--seeds", "1", "--families", "start,healthy",
                 "--kinds", "slow_nic", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "start slow_nic" in text and "healthy" in text and "occ" in text
    res = json.loads(out.read_text())
    runs = res["fabrics"]["rail"]["scenarios"]
    assert [d["label"] for d in runs] == ["start slow_nic", "healthy", "healthy ecmp"]
    nic = runs[0]["score"]["faults"][0]
    assert nic["top1"] and np.isclose(nic["latency_s"] or 0.0, 0.0, atol=5.0)
    assert all(d["score"]["false_reports"] == 0 for d in runs)
