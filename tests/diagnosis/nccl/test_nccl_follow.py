"""Following an Inspector dump directory as it grows: new lines, a partial last line, several
processes, a file renamed (rotated) with lines still unread, a file truncated under the reader
(warned with file and line, read again from its start, nothing read twice)."""

from __future__ import annotations

import gzip
import logging

from diagnosis.nccl.follow import InspectorFollower
from tests.diagnosis.nccl.test_nccl_inspector import LINE


def _line(sn: int, pid: int = 77) -> bytes:
    return LINE.replace(b'"coll_sn":1407', b'"coll_sn":%d' % sn).replace(
        b'"pid":77', b'"pid":%d' % pid) + b"\n"


def _sns(batches) -> list[tuple[int, int]]:
    return sorted((b.procs[int(p)][1], int(s)) for b in batches for p, s in zip(b.proc, b.sn))


def test_new_lines_partial_lines_and_several_processes(tmp_path):
    f = InspectorFollower(tmp_path)
    assert f.poll() == []
    a, b = tmp_path / "node1-pid77.log", tmp_path / "node1-pid78.log"
    a.write_bytes(_line(1) + _line(2) + _line(3)[:40])          # the dump thread mid-line
    b.write_bytes(_line(1, 78))
    assert _sns(f.poll()) == [(77, 1), (77, 2), (78, 1)]
    with open(a, "ab") as fh:
        fh.write(_line(3)[40:] + _line(4))
    assert _sns(f.poll()) == [(77, 3), (77, 4)]
    assert f.poll() == [] and f.rows_read == 5
    (tmp_path / "old-pid5.log.gz").write_bytes(gzip.compress(_line(9, 5)))   # archives: not
    assert f.poll() == []
    f.close()


def test_a_renamed_file_is_read_to_its_end_and_the_new_one_from_its_start(tmp_path):
    f = InspectorFollower(tmp_path)
    log_path = tmp_path / "node1-pid77.log"
    log_path.write_bytes(_line(1))
    assert _sns(f.poll()) == [(77, 1)]
    with open(log_path, "ab") as fh:
        fh.write(_line(2))                                        # not read yet ...
    log_path.rename(tmp_path / "node1-pid77.log.1")               # ... when it is rotated
    (tmp_path / "node1-pid77.log.1").rename(tmp_path / "archive-77")   # and moved away
    log_path.write_bytes(_line(3))
    assert _sns(f.poll()) == [(77, 2), (77, 3)]
    assert f.poll() == [] and f.poll() == []
    assert len(f._files) == 1                                     # the moved one let go
    f.close()


def test_a_truncated_file_is_warned_about_and_read_again_from_its_start(tmp_path, caplog):
    f = InspectorFollower(tmp_path)
    path = tmp_path / "node1-pid77.log"
    path.write_bytes(_line(1) + _line(2) + _line(3))
    assert _sns(f.poll()) == [(77, 1), (77, 2), (77, 3)]
    path.write_bytes(_line(4))                  # copy-and-truncate rotation, then a new dump
    with caplog.at_level(logging.WARNING):
        assert _sns(f.poll()) == [(77, 4)]
    assert f.problems.counts["truncated_file"] == 1
    assert f"{path}:4: the file shrank" in caplog.text             # file and line
    with open(path, "ab") as fh:
        fh.write(_line(5) + b'{"header":{"id"\n' + _line(6))      # a line cut short inside
    with caplog.at_level(logging.WARNING):
        assert _sns(f.poll()) == [(77, 5), (77, 6)]                # the rest is read
    assert f"{path}:3: not a JSON object" in caplog.text
    f.close()
