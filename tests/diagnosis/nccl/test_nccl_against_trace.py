"""One simulated run written both as c4's trace and as NCCL's Inspector would have written it:
read back through the NCCL readers, reconciled and converted, every call the Inspector wrote is
the trace's call of the same rank, group, operation and sequence number, ending at the same
microsecond, and only the calls that completed after a process's last dump are missing."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import Columns, concat
from c4.topology import Topology
from diagnosis.nccl.analyze import resolve_job
from diagnosis.nccl.convert import OpConverter
from diagnosis.nccl.sources import read_sources
from diagnosis.sim.formats import INSPECTOR_DIR, RAS_FILE
from diagnosis.trace import read_trace
from tests.diagnosis.nccl.support import simulated


def test_inspector_rows_are_the_trace_rows(tmp_path):
    out = simulated(str(tmp_path), None, gpus=64, formats=("trace", "nccl-inspector",
                                                            "ncclras"))
    trace = concat([b for b in read_trace(next(out.glob("trace.jsonl*")))
                    if isinstance(b, Columns)])
    sources = read_sources([out / INSPECTOR_DIR], [out / RAS_FILE])
    assert len(sources.problems) == sum(v for k, v in sources.problems.counts.items()
                                        if k == "nan")           # nothing else to warn about
    resolved = resolve_job(sources, Topology.load(out / "topology.json"))
    conv = OpConverter(resolved)
    got = concat([c for c in (conv.convert(b) for b in sources.ops) if c is not None])

    def key(cols: Columns) -> dict[tuple[int, str, str, int], int]:
        # point-to-point calls are numbered per direction, in c4's trace as in NCCL
        c, st = cols.columns, cols.strings
        return {(int(r), st[int(p)], st[int(o)], int(s)): int(e) // 1000 for r, p, o, s, e in
                zip(c["rank"], c["pg"], c["op"], c["seq"], c["t_end_ns"])}

    want, have = key(trace), key(got)
    assert len(have) == len(got) > 0.9 * len(want)
    assert set(have) <= set(want)                               # no call c4 did not make
    assert all(have[k] == want[k] for k in have)               # ends to the microsecond
    # the missing ones are each rank's last calls (after its last dump), never a gap
    for rank in range(64):
        mine = {k[1:]: want[k] for k in want if k[0] == rank}
        seen = [want[(rank, *k)] for k in mine if (rank, *k) in have]
        lost = [t for k, t in mine.items() if (rank, *k) not in have]
        assert not lost or min(lost) >= max(seen), rank
    assert np.all(got.columns["t_enter_ns"] <= got.columns["t_end_ns"])
