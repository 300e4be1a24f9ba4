"""PyTorch Flight Recorder dumps: read them safely and find who hung, mismatched or failed.

``analyze_dumps(DIR)`` (``c4 analyze --flight-recorder DIR``) reads one dump per rank, pickle or
JSON, format 2.x, from gloo or NCCL, and files fault reports (shared specs section 3) with
ranks as suspects. The parts:

* dumps.py, parse.py: files, a pickle reader that loads plain data only, every field checked;
* groups.py: group identity and members (``pg_config`` where usable, else the entries);
* calls.py: entries arranged by call, coalesced groups as one call, what wrapped buffers show;
* p2p.py: sends matched with receives by pair and order;
* analyzer.py (hangs and their culprits), mismatch.py, comm.py (stuck transfers, failures).
"""

from __future__ import annotations

from diagnosis.flight_recorder.analyzer import analyze, analyze_dumps
from diagnosis.flight_recorder.dumps import FrEntry, RankDump, load_dump, load_dumps

__all__ = ["FrEntry", "RankDump", "analyze", "analyze_dumps", "load_dump", "load_dumps"]
