"""The sampling schedule a sidecar applies: per communicator, from seq S on, factor K."""

from __future__ import annotations

import numpy as np
import pytest

from c4.proto import c4_pb2
from c4.proto.sampling import sampled_mask
from collectors.sidecar.schedule import Schedule
from tests.support.reduce_ops import ops


def _calls(pg: str, seqs: range, ranks: int = 2):
    rows = [{"rank": r, "pg": pg, "seq": s, "op": "all_reduce", "t_enter_ns": s,
             "t_end_ns": s + 1} for s in seqs for r in range(ranks)]
    return ops(rows, [pg, "all_reduce"])


def test_factor_follows_the_steps_and_other_communicators_keep_everything():
    msg = c4_pb2.SampleSchedule(job="j", version=3, steps=[
        c4_pb2.SampleStep(pg="dp", from_seq=100, sample=16),
        c4_pb2.SampleStep(pg="dp", from_seq=500, sample=4)])
    s = Schedule.from_proto(msg)
    assert [s.factor("dp", q) for q in (0, 99, 100, 499, 500, 10**9)] == [1, 1, 16, 16, 4, 4]
    assert s.factor("tp", 10**6) == 1 and s.max_sample == 16
    back = Schedule.from_proto(s.to_proto("j", 0))
    assert back == s


def test_kept_rows_are_the_sampled_calls_from_the_step_on_on_every_rank():
    s = Schedule(1, {"dp": ((64, 8),)})
    cols = _calls("dp", range(0, 512))
    keep = s.kept(cols)
    seq = cols["seq"]
    assert keep[seq < 64].all()
    late = seq >= 64
    want = sampled_mask(["dp"] * int(late.sum()), seq[late].tolist(), 8)
    np.testing.assert_array_equal(keep[late], want)
    # both ranks of a call are kept together
    kept = cols["seq"][keep & (cols["rank"] == 0)]
    np.testing.assert_array_equal(kept, cols["seq"][keep & (cols["rank"] == 1)])
    assert 0.05 < (keep[late].mean()) < 0.25


def test_powers_of_two_nest():
    cols = _calls("pp.3", range(0, 4096), ranks=1)
    at = {k: Schedule(1, {"pp.3": ((0, k),)}).kept(cols) for k in (2, 4, 8, 16, 32)}
    for k in (2, 4, 8, 16):
        assert not (at[2 * k] & ~at[k]).any(), f"K={2 * k} kept a call that K={k} dropped"


def test_a_bad_step_is_refused():
    with pytest.raises(ValueError, match="factor 0"):
        Schedule.from_proto(c4_pb2.SampleSchedule(steps=[c4_pb2.SampleStep(pg="0", sample=0)]))


def test_the_default_factor_holds_before_the_first_step_and_without_steps():
    s = Schedule.from_proto(c4_pb2.SampleSchedule(job="j", version=1, default_sample=64, steps=[
        c4_pb2.SampleStep(pg="dp", from_seq=1000, sample=16)]))
    assert (s.factor("dp", 999), s.factor("dp", 1000), s.factor("tp", 5)) == (64, 16, 64)
    assert s.max_sample == 64
    cols = _calls("tp", range(0, 2048), ranks=1)
    np.testing.assert_array_equal(s.kept(cols), sampled_mask(["tp"] * 2048, range(2048), 64))
    assert Schedule.from_proto(c4_pb2.SampleSchedule()).max_sample == 1
