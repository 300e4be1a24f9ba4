"""Whether a change to the engine leaves its reports unchanged: runs ``c4 analyze``'s feed
(one process, or with ``--jobs N`` N parser processes) over traces written by ``c4 sim`` and
keeps every report the engine returns on the way (each revision, as the daemon would store it)
and its incidents at the end, as JSON.
``record`` writes them to a file; ``compare`` runs again and says where the reports differ.
Engine CPU seconds (reading included) are printed per trace.

    python -m bench.engine_identity record before.json DIR [DIR ...]
    python -m bench.engine_identity compare before.json DIR [DIR ...]
    python -m bench.engine_identity compare --jobs 1 before.json DIR [DIR ...]

With ``--jobs`` CPU seconds are this process's (the engine's and the feed's), not the parsers'.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def _run(trace_dir: Path, jobs: int = 0) -> tuple[dict[str, Any], float]:
    """Every report returned by ``advance`` (in order) and the incidents at the end."""
    from c4.topology import Topology
    from diagnosis.engine import Engine
    from diagnosis.trace.feed import feed_trace

    topo_path = trace_dir / "topology.json"
    engine = Engine(Topology.load(topo_path) if topo_path.exists() else None)
    changes: list[dict[str, Any]] = []
    advance = engine.advance

    def recording(now_ns: int) -> list:
        out = advance(now_ns)
        changes.extend(r.to_json() for r in out)
        return out

    engine.advance = recording  # type: ignore[method-assign]
    t = time.process_time()
    final, _ = feed_trace(engine, trace_dir / "trace.jsonl", workers=jobs)
    cpu = time.process_time() - t
    return {"changes": changes,
            "final": [r.to_json() for r in final],
            "incidents": [r.to_json() for r in engine.incidents()]}, cpu


def _first_difference(a: Any, b: Any, where: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{where}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'after' if k in b else 'before'}"
            d = _first_difference(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items before, {len(b)} after"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, float) and a != a and b != b:
        return None      # NaN both times
    return None if a == b else f"{where}: {a!r} before, {b!r} after"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "compare"))
    ap.add_argument("file", type=Path, help="the reports recorded before the change")
    ap.add_argument("traces", type=Path, nargs="+", help="directories written by c4 sim")
    ap.add_argument("--jobs", type=int, default=0, help="parser processes, as c4 analyze "
                    "--jobs (traces over 64 MB only; default 0: read in this process)")
    args = ap.parse_args()
    got: dict[str, Any] = {}
    print(f"{'trace':<40}{'cpu s':>8}{'changes':>9}{'final':>7}  same")
    before = json.loads(args.file.read_text()) if args.mode == "compare" else {}
    bad = 0
    for d in args.traces:
        out, cpu = _run(d, args.jobs)
        got[str(d)] = out
        same = "-"
        if args.mode == "compare":
            ref = before.get(str(d))
            diff = "not recorded" if ref is None else _first_difference(ref, out)
            same = "yes" if diff is None else f"NO {diff}"
            bad += diff is not None
        print(f"{d!s:<40}{cpu:>8.2f}{len(out['changes']):>9}{len(out['final']):>7}  {same}",
              flush=True)
    if args.mode == "record":
        args.file.write_text(json.dumps(got))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
