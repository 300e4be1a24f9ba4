"""Raw socket samples as linkstat windows (what `c4 export` writes for a job whose telemetry was
full): each socket's bytes and retransmissions between samples land in the window they end
in, the peer is named where its end of the socket was sampled too."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import CONN_COLUMNS, Columns
from c4.reduce.links import sample_windows

S = 1_000_000_000


def _samples(rows: list[tuple[int, int, int, int, int, int]]) -> Columns:
    """(rank, local, remote, t_ns, bytes_acked, retrans) over endpoints "a" (0), "b" (1)."""
    cols = {name: np.zeros(len(rows), dtype=dt) for name, dt in CONN_COLUMNS.items()}
    for i, (rank, loc, rem, t, acked, retx) in enumerate(rows):
        for name, v in zip(("rank", "local", "remote", "t_ns", "bytes_acked", "retrans"),
                           (rank, loc, rem, t, acked, retx), strict=True):
            cols[name][i] = v
    return Columns(cols, ["10.0.0.1:5000", "10.0.0.2:6000"])


def test_bytes_and_retransmissions_land_in_their_windows_with_the_peer_named():
    rows = [(0, 0, 1, 10 * S + k * S // 2, 1000 * k, 3 * k) for k in range(6)]   # 0 -> 1
    rows += [(1, 1, 0, 10 * S + k * S // 2, 10 * k, 0) for k in range(6)]        # 1 -> 0
    # unsorted, as batches of several nodes arrive
    got = sample_windows(_samples(rows[::-1]), S)
    assert got is not None
    out = {(int(s), int(d), int(t)): (int(b), int(r)) for s, d, t, b, r in zip(
        got["src"], got["dst"], got["t_ns"], got["bytes"], got["retrans"], strict=True)}
    # 5 intervals of 1000 bytes and 3 retransmissions each, ending at 10.5, 11, 11.5, 12 and
    # 12.5 s; a window [t - 1 s, t) is written at its end t, the last one cut short at the
    # last sample
    assert out[(0, 1, 11 * S)] == (1000, 3)
    assert out[(0, 1, 12 * S)] == (2000, 6)
    assert out[(0, 1, 12 * S + S // 2)] == (2000, 6)
    assert sum(b for (s, _, _), (b, _) in out.items() if s == 1) == 50
    assert got["window_ns"].tolist() == [S] * 4 + [S // 2] * 2


def test_no_samples_or_no_movement_gives_nothing():
    assert sample_windows(_samples([]), S) is None
    assert sample_windows(_samples([(0, 0, 1, S, 5, 0)]), S) is None
