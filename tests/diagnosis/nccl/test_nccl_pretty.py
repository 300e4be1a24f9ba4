"""``diagnosis.nccl.pretty.json_documents``, the one reader of pretty-printed record files
(Inspector dumps and profiler latency files as documentation shows them): each document with
the line it starts on; a document cut short is a problem on its line and ends the file."""

from __future__ import annotations

import json

from diagnosis.nccl.comma import parse_comma
from diagnosis.nccl.pretty import json_documents
from diagnosis.nccl.problems import Problems

CUT = '{\n  "a": 1\n}\n\n{\n  "b": [1,\n   2]\n}\n{\n  "c": \n'


def test_documents_come_with_their_first_line_and_a_cut_one_ends_the_file():
    problems = Problems()
    assert list(json_documents(CUT, "f.json", problems)) == [(1, {"a": 1}), (5, {"b": [1, 2]})]
    [problem] = problems.seen
    assert (problem.source, problem.line, problem.kind) == ("f.json", 9, "bad_line")
    assert "cut short" in problem.message


def test_the_profiler_s_pretty_latency_file_reads_as_its_json_lines():
    record = {"cat": "COLL", "name": "all_reduce", "comm_hash": "0x58aecebabb9e37af",
              "rank": 0, "seq_num": 57, "ts": 9615369, "dur": 11039, "args": {"size": 1 << 20}}
    pretty = "\n".join(json.dumps({**record, "seq_num": s}, indent=2) for s in (1, 2)) + "\n"
    lines = "\n".join(json.dumps({**record, "seq_num": s}) for s in (1, 2)) + "\n"
    calls = [[(c.line > 0, c.sn, c.nbytes, c.ts_us) for c in parse_comma(text, "x").calls]
             for text in (pretty, lines)]
    assert calls[0] == calls[1] and len(calls[0]) == 2
