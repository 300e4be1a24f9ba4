"""The accuracy scorer on hand-made reports: what counts as a hit, a miss and a false report."""

from __future__ import annotations

from bench.accuracy.score import ScenarioScore, canonical, score_scenario, summarize

ONSET = 1_000_000_000_000
STARTS = [ONSET + (i - 10) * 1_000_000_000 for i in range(40)]   # iteration i starts at i s


def truth(*faults: dict) -> dict:
    return {"iterations": 40, "iteration_start_ns": STARTS, "faults": list(faults)}


def fault(kind: str, expected: str, accept: list[tuple[str, str]], **kw) -> dict:
    return {"kind": kind, "expected_report": expected, "onset_ns": ONSET, "onset_iteration": 10,
            "accept": [{"type": t, "id": i} for t, i in accept], "observable": True,
            "spec": f"{kind}:x@10", **kw}


def report(kind: str, *suspects: tuple[str, str], t: int = ONSET + 3_500_000_000, **kw) -> dict:
    return {"kind": kind, "first_seen_ns": t, "summary": "",
            "suspects": [{"type": a, "id": b, "score": 0.5 - 0.01 * i}
                         for i, (a, b) in enumerate(suspects)], **kw}


GPU = fault("slow_gpu", "noncomm_slow", [("gpu", "node003/gpu2"), ("rank", "26")])
CABLE = fault("slow_link", "comm_slow", [("link", "leaf00r2~node003/nic2"),
                                         ("nic", "node003/nic2")])
UPLINK = fault("slow_link", "comm_slow", [("link", "leaf00r2~spine03")])


def one(t: dict, *reps: dict):
    sc = score_scenario(t, list(reps))
    return sc, (sc.faults[0] if sc.faults else None)


def test_top1_hit_with_latency():
    sc, f = one(truth(GPU), report("noncomm_slow", ("gpu", "node003/gpu2"), ("host", "node003")))
    assert (f.detected, f.top1, f.top3) == (True, True, True)
    assert f.latency_s == 3.5 and f.latency_iters == 3
    assert sc.false_reports == 0 and sc.clean


def test_right_component_wrong_kind_is_a_miss_and_a_false_report():
    sc, f = one(truth(GPU), report("comm_slow", ("gpu", "node003/gpu2")))
    assert (f.detected, f.top1, f.top3) == (False, False, False)
    assert sc.false_reports == 1 and not sc.clean


def test_second_or_third_suspect_is_top3_only():
    sc, f = one(truth(GPU), report("noncomm_slow", ("gpu", "node003/gpu1"), ("host", "node003"),
                                   ("gpu", "node003/gpu2")))
    assert (f.top1, f.top3) == (False, True) and sc.false_reports == 0 and not sc.clean
    sc, f = one(truth(GPU), report("noncomm_slow", ("gpu", "a"), ("gpu", "b"), ("gpu", "c"),
                                   ("gpu", "node003/gpu2")))
    assert (f.detected, f.top3) == (True, False) and sc.false_reports == 1


def test_host_does_not_stand_in_for_its_gpu():
    _, f = one(truth(GPU), report("noncomm_slow", ("host", "node003")))
    assert not f.top3


def test_rank_suspect_matches_the_gpu_that_runs_it():
    r = report("noncomm_slow")
    r["suspects"] = [{"type": "rank", "id": "26", "rank": 26, "score": 0.9}]
    assert one(truth(GPU), r)[1].top1
    r["suspects"] = [{"type": "rank", "id": "27", "rank": 27, "score": 0.9}]
    assert not one(truth(GPU), r)[1].top3


def test_nic_and_its_cable_are_interchangeable_but_uplinks_are_not():
    assert one(truth(CABLE), report("comm_slow", ("nic", "node003/nic2")))[1].top1
    # link ids compare with endpoints sorted
    assert one(truth(CABLE), report("comm_slow", ("link", "node003/nic2~leaf00r2")))[1].top1
    assert not one(truth(UPLINK), report("comm_slow", ("switch", "leaf00r2")))[1].top3
    assert not one(truth(UPLINK), report("comm_slow", ("link", "leaf00r2~spine04")))[1].top3


def test_equivalent_components_count_only_in_their_own_column():
    twin = {**UPLINK, "equivalent": [{"type": "link", "id": "leaf01r2~spine03"}]}
    sc, f = one(truth(twin), report("comm_slow", ("link", "leaf01r2~spine03")))
    assert (f.top1, f.top3, f.top1_equiv) == (False, False, True)
    assert sc.false_reports == 1


def scored(kind: str, *suspects: tuple[str, str, float]) -> dict:
    return {"kind": kind, "first_seen_ns": ONSET + 3_500_000_000, "summary": "",
            "suspects": [{"type": a, "id": b, "score": x} for a, b, x in suspects]}


TWIN = {**UPLINK, "equivalent": [{"type": "link", "id": "leaf01r2~spine03"}]}


def test_exact_tie_with_an_equivalent_is_ambiguous_not_a_hit():
    sc, f = one(truth(TWIN), scored("comm_slow", ("link", "leaf01r2~spine03", 0.5),
                                    ("link", "leaf00r2~spine03", 0.5)))
    assert (f.top1, f.ambiguous, f.top3) == (False, True, True)
    assert sc.false_reports == 0 and sc.clean
    row = summarize([("slow_link", 512, sc, "x")])[0]
    assert (row.faults, row.ambiguous, row.identifiable, row.top1_pct()) == (1, 1, 0, None)
    assert "ambiguous" in row.failures[0]


def test_a_lower_score_or_a_non_equivalent_ahead_is_a_miss_not_ambiguous():
    _, f = one(truth(TWIN), scored("comm_slow", ("link", "leaf01r2~spine03", 0.5),
                                   ("link", "leaf00r2~spine03", 0.49)))
    assert (f.top1, f.ambiguous, f.top3) == (False, False, True)
    _, f = one(truth(TWIN), scored("comm_slow", ("link", "leaf07r2~spine03", 0.5),
                                   ("link", "leaf00r2~spine03", 0.5)))
    assert (f.top1, f.ambiguous) == (False, False)
    # naming everything equally does not make a fault ambiguous without the ground truth's say
    _, f = one(truth(UPLINK), scored("comm_slow", ("link", "leaf01r2~spine03", 0.5),
                                     ("link", "leaf00r2~spine03", 0.5)))
    assert (f.top1, f.ambiguous) == (False, False)


def test_a_tie_with_an_equivalent_is_ambiguous_whichever_is_listed_first():
    # listing order inside a tie is no evidence: counting the lucky order as a hit and the
    # other as ambiguous would turn coin flips into 100%
    sc, f = one(truth(TWIN), scored("comm_slow", ("link", "leaf00r2~spine03", 0.5),
                                    ("link", "leaf01r2~spine03", 0.5)))
    assert (f.top1, f.ambiguous, f.top3) == (False, True, True) and sc.clean


def test_a_tie_with_a_non_equivalent_is_a_miss_and_a_tie_with_accepted_is_a_hit():
    _, f = one(truth(TWIN), scored("comm_slow", ("link", "leaf00r2~spine03", 0.5),
                                   ("link", "leaf05r2~spine03", 0.5)))
    assert (f.top1, f.ambiguous, f.top3) == (False, False, True)
    _, f = one(truth(CABLE), scored("comm_slow", ("nic", "node003/nic2", 0.5),
                                    ("link", "leaf00r2~node003/nic2", 0.5)))
    assert (f.top1, f.ambiguous) == (True, False)


def test_report_about_an_earlier_time_does_not_count():
    # an onset estimate up to 5 iterations early still counts, and its error is reported
    sc, f = one(truth(GPU), report("noncomm_slow", ("gpu", "node003/gpu2"), t=ONSET - 3e9))
    assert f.top1 and f.onset_error_s == -3.0 and f.latency_s == 0.0
    sc, f = one(truth(GPU), report("noncomm_slow", ("gpu", "node003/gpu2"),
                                   t=ONSET - 5e9 - 2_000_000))
    assert not f.detected and sc.false_reports == 1
    # a report that had already appeared before the onset is about something else
    sc, f = one(truth(GPU), report("noncomm_slow", ("gpu", "node003/gpu2"), t=ONSET - 1e9,
                                   detected_ns=ONSET - 2_000_000))
    assert not f.detected and sc.false_reports == 1
    assert one(truth(GPU), report("noncomm_slow", ("gpu", "node003/gpu2"), t=ONSET - 1e9,
                                  detected_ns=ONSET + 1e9))[1].top1


def test_latency_uses_streamed_detection_time_and_the_earliest_hit():
    late = report("noncomm_slow", ("gpu", "node003/gpu2"), t=ONSET + 9e9)
    early = report("noncomm_slow", ("host", "node003"), ("gpu", "node003/gpu2"),
                   t=ONSET + 2e9, detected_ns=ONSET + 5_200_000_000)
    _, f = one(truth(GPU), late, early)
    assert f.top1 and f.latency_s == 5.2 and f.latency_iters == 5


def test_every_report_on_a_healthy_run_is_false():
    sc, _ = one(truth(), report("noncomm_slow", ("gpu", "x")), report("comm_hang"))
    assert sc.healthy and sc.false_reports == 2


def test_several_faults_each_scored_and_extra_reports_counted():
    t = truth(GPU, CABLE)
    sc = score_scenario(t, [report("noncomm_slow", ("gpu", "node003/gpu2")),
                            report("comm_slow", ("nic", "node009/nic0")),
                            report("comm_slow", ("link", "leaf00r2~node003/nic2"))])
    assert [f.top1 for f in sc.faults] == [True, True]
    assert sc.false_reports == 1 and not sc.clean


def test_unobservable_faults_are_neither_hit_nor_miss():
    hidden = {**UPLINK, "observable": False}
    rows = summarize([("slow_link", 512, score_scenario(truth(hidden), []), "s1"),
                      ("slow_link", 512, score_scenario(truth(UPLINK), []), "s2")])
    (row,) = rows
    assert (row.faults, row.unobservable, row.top1) == (1, 1, 0)
    assert row.failures == ["s2: slow_link:x@10: no comm_slow report"]


def test_summary_rates():
    hit = score_scenario(truth(GPU), [report("noncomm_slow", ("gpu", "node003/gpu2"))])
    miss = score_scenario(truth(GPU), [report("noncomm_slow", ("gpu", "node003/gpu5"))])
    healthy = score_scenario(truth(), [report("noncomm_slow", ("gpu", "x"))])
    rows = summarize([("slow_gpu", 512, hit, "a"), ("slow_gpu", 512, miss, "b"),
                      ("healthy", 512, healthy, "h"),
                      ("healthy", 512, ScenarioScore((), 0, 0, 40), "h2")])
    gpu, ok = rows
    assert (gpu.label, ok.label) == ("slow_gpu", "healthy")
    assert gpu.to_json()["top1_pct"] == 50.0 and gpu.to_json()["detected_pct"] == 100.0
    assert ok.false_reports == 1 and ok.iterations == 80 and ok.false_per_1000_iters == 12.5


def test_canonical():
    assert canonical({"type": "link", "id": "b~a"}) == ("link", "a~b")
    assert canonical({"type": "rank", "id": "7"}) == ("rank", "7")
    assert canonical({"type": "gpu", "id": "n/gpu1", "rank": 3}) == ("gpu", "n/gpu1")


def test_a_hang_report_that_names_no_suspect_detects_but_never_hits_and_is_not_false():
    hang = fault("comm_hang", "comm_hang", [("gpu", "node054/gpu7"), ("rank", "439")])
    sc, f = one(truth(hang), report("comm_hang"))
    assert (f.detected, f.top1, f.top3, f.ambiguous) == (True, False, False, False)
    assert sc.false_reports == 0 and not sc.clean
    # naming the wrong components instead is a false report
    sc, f = one(truth(hang), report("comm_hang", ("nic", "node030/nic7"), ("nic", "node038/nic7")))
    assert (f.detected, f.top3) == (True, False) and sc.false_reports == 1
    # a report of another kind, or before the onset, addresses nothing: false, suspects or not
    sc, _ = one(truth(hang), report("noncomm_hang"))
    assert sc.false_reports == 1
    sc, _ = one(truth(hang), report("comm_hang", t=ONSET - 30_000_000_000))
    assert sc.false_reports == 1
    # on a healthy run every report is false
    sc, _ = one(truth(), report("comm_hang"))
    assert sc.false_reports == 1
