"""Which op rows the reduced stream keeps."""

from __future__ import annotations

import zlib

import numpy as np

from c4.proto.sampling import is_sampled
from c4.reduce import EdgeReducer, kept_rows
from tests.support.reduce_ops import ops

S = ["all_reduce", "send", "recv", "tp.0", "tp.1", "pp.0"]


def _calls(n_seq: int, status: int = 0, open_: bool = False) -> list[dict]:
    rows = []
    for pg in ("tp.0", "tp.1"):
        for seq in range(n_seq):
            for rank in range(4):
                rows.append({"rank": rank, "pg": pg, "seq": seq, "op": "all_reduce",
                             "t_enter_ns": seq * 10, "t_end_ns": None if open_ else seq * 10 + 5,
                             "status": status})
    return rows


def test_k1_keeps_everything():
    cols = ops(_calls(50), S)
    red = EdgeReducer(sample=1)
    kept = red.add_ops(cols)
    assert len(kept) == len(cols) and red.stats.ops_kept == len(cols)


def test_sampled_calls_follow_the_crc_rule_on_every_member():
    cols = ops(_calls(400), S)
    k = 16
    mask = kept_rows(cols, k)
    names = cols.names("pg")
    for i in range(len(cols)):
        want = zlib.crc32(f"{names[i]}:{cols['seq'][i]}".encode()) % k == 0
        assert mask[i] == want == is_sampled(names[i], int(cols["seq"][i]), k)
    # a kept call is kept on all of its members
    kept = {(names[i], int(cols["seq"][i])) for i in np.flatnonzero(mask)}
    assert len(np.flatnonzero(mask)) == 4 * len(kept)
    assert 0.02 < len(kept) / 800 < 0.12          # about 1 in 16


def test_errors_are_kept_unsampled_and_open_rows_only_when_sampled():
    k = 64
    failed = ops(_calls(100, status=2), S)
    assert kept_rows(failed, k).all()
    opened = ops(_calls(100, open_=True), S)
    names = opened.names("pg")
    want = np.array([is_sampled(p, int(s), k) for p, s in zip(names, opened["seq"])])
    assert (kept_rows(opened, k) == want).all() and 0 < want.sum() < len(want)


def test_kept_rows_keep_their_error_text():
    cols = ops(_calls(40, status=2), S)
    cols.error_text = {3: "boom", 7: "bang"}
    kept = EdgeReducer(sample=1000).sample_ops(cols)
    assert kept.error_text == {3: "boom", 7: "bang"}
    cols["status"][3] = 0
    kept = EdgeReducer(sample=100000).sample_ops(cols)
    assert "boom" not in kept.error_text.values() and "bang" in kept.error_text.values()
