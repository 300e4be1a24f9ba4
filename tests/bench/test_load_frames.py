"""bench.load's prebuilt frames decode, through the collector wire, into exactly the calls the
generator means to send."""

from __future__ import annotations

import numpy as np

from bench.load import JOB, PG, FrameBank
from c4.proto.codec import decode_ops
from collectors.wire import decode_frames


def test_prebuilt_frames_decode_to_the_stamped_calls():
    ranks = np.array([0, 7, 4095, 16383])
    bank = FrameBank(ranks, 4)
    for tick, now in ((0, 5_000_000_000), (3, 11_000_000_000)):
        bank.stamp(1, 4, tick * 4, now, np.random.default_rng(tick))
        frames = decode_frames(bytearray(bank.frames[1:4].tobytes()))
        assert len(frames) == 3
        for rank, frame in zip(ranks[1:], frames):
            cols = decode_ops(frame.ops)
            assert frame.ops.job == JOB and cols.strings[cols["pg"][0]] == PG
            assert (cols["rank"] == rank).all()
            assert cols["seq"].tolist() == list(range(tick * 4, tick * 4 + 4))
            enter = cols["t_enter_ns"]
            assert (np.diff(enter) > 900_000).all() and enter[-1] <= now + 50_000
            assert (cols["t_end_ns"] - enter == 800_000).all()
            assert (cols["peer"] == -1).all() and (cols["t_start_ns"] == -1).all()
    # rows not stamped keep their rank and are left alone
    assert decode_ops(decode_frames(bytearray(bank.frames[0].tobytes()))[0].ops)["rank"][0] == 0
