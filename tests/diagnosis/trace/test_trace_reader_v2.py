"""The trace reader on format version 2 (shared specs section 2, "Version 2"): meta sample,
progress, linkstat and port records and conn retrans as columns, every bad field named by line
and field, unknown record types skipped with one warning each, any mix with version 1."""

from __future__ import annotations

import gzip
import io
import logging

import numpy as np
import pytest

from c4.errors import FormatError
from c4.proto.codec import Columns
from diagnosis.engine import ConnRecords
from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords
from diagnosis.trace import Meta, RankInfo, read_trace
from diagnosis.trace.parallel import read_blocks_parallel

V2 = b"""\
{"type":"meta","version":2,"job":"big","sample":8}
{"type":"rank","rank":0,"host":"h0","nic":"h0/nic0"}
{"type":"progress","rank":0,"pg":"dp.0","t_ns":1000,"entered":7,"completed":6}
{"type":"progress","rank":1,"pg":"pp.0","t_ns":1001,"op":"send","peer":0,"entered":3}
{"type":"progress","rank":2,"pg":"dp.0","t_ns":1002}
{"type":"linkstat","src":0,"dst":1,"t_ns":2000,"window_ns":1000,"pg":"dp.0","path":["h0/nic0","leaf0","h1/nic0"],"transfers":4,"bytes":4096,"busy_ns":800,"max_ns":300,"retrans":2}
{"type":"linkstat","src":1,"dst":0,"t_ns":2000,"window_ns":1000,"open":1,"open_since_ns":1500,"pg":null,"path":null}
{"type":"port","host":"h0","nic":"h0/nic0","t_ns":3000,"state":"down","link_downed":1,"symbol_errors":12}
{"type":"port","host":"h1","nic":"h1/nic0","t_ns":3001,"state":"up","rx_bytes":99}
{"type":"conn","src":0,"dst":1,"bytes":64,"t_start_ns":10,"t_end_ns":20,"retrans":5}
{"type":"conn","src":1,"dst":0,"bytes":64,"t_start_ns":11}
{"type":"end","t_ns":4000}
"""


def _items(data: bytes, block_bytes: int = 4 << 20) -> list:
    return list(read_trace(io.BytesIO(data), block_bytes=block_bytes, name="v2.jsonl"))


def _one(items: list, cls: type):
    found = [i for i in items if isinstance(i, cls)]
    assert len(found) == 1, [type(i).__name__ for i in items]
    return found[0]


def _names(strings: list[str], col: np.ndarray) -> list[str | None]:
    return [strings[i] if i >= 0 else None for i in col.tolist()]


def test_meta_carries_version_and_sample():
    items = _items(V2)
    assert items[0] == Meta(2, "big", 8)
    assert _items(b'{"type":"meta","version":1}\n') == [Meta(1, None, 1)]
    assert _items(b'{"type":"meta","version":1,"sample":1}\n') == [Meta(1, None, 1)]
    assert _items(b'{"type":"meta","version":2}\n') == [Meta(2, None, 1)]


def test_progress_lines_become_columns():
    p = _one(_items(V2), ProgressRecords)
    assert p.rank.tolist() == [0, 1, 2]
    assert _names(p.strings, p.pg) == ["dp.0", "pp.0", "dp.0"]
    assert _names(p.strings, p.op) == [None, "send", None]
    assert p.peer.tolist() == [-1, 0, -1]
    assert p.t_ns.tolist() == [1000, 1001, 1002]
    assert p.entered.tolist() == [7, 3, -1]           # absent: none entered yet
    assert p.completed.tolist() == [6, -1, -1]


def test_linkstat_lines_become_columns_absent_counts_zero():
    s = _one(_items(V2), LinkStatRecords)
    assert (s.src.tolist(), s.dst.tolist()) == ([0, 1], [1, 0])
    assert s.t_ns.tolist() == [2000, 2000] and s.window_ns.tolist() == [1000, 1000]
    assert _names(s.strings, s.pg) == ["dp.0", None]
    assert s.paths == [("h0/nic0", "leaf0", "h1/nic0"), None]
    assert s.transfers.tolist() == [4, 0] and s.bytes.tolist() == [4096, 0]
    assert s.busy_ns.tolist() == [800, 0] and s.max_ns.tolist() == [300, 0]
    assert s.open.tolist() == [0, 1] and s.open_since_ns.tolist() == [-1, 1500]
    assert s.retrans.tolist() == [2, -1]               # absent: not counted


def test_port_lines_become_columns_with_the_counters_given():
    p = _one(_items(V2), PortRecords)
    assert _names(p.strings, p.host) == ["h0", "h1"]
    assert _names(p.strings, p.nic) == ["h0/nic0", "h1/nic0"]
    assert p.t_ns.tolist() == [3000, 3001] and p.up.tolist() == [0, 1]
    assert sorted(p.counters) == ["link_downed", "rx_bytes", "symbol_errors"]
    assert p.counters["link_downed"].tolist() == [1, -1]
    assert p.counters["symbol_errors"].tolist() == [12, -1]
    assert p.counters["rx_bytes"].tolist() == [-1, 99]


def test_conn_retrans_per_row_and_none_when_no_row_has_it():
    c = _one(_items(V2), ConnRecords)
    assert c.retrans.tolist() == [5, -1]
    plain = _one(_items(b'{"type":"conn","src":0,"dst":1,"bytes":1,"t_start_ns":1}\n'),
                 ConnRecords)
    assert plain.retrans is None


def test_block_size_does_not_change_the_rows():
    """One batch per kind and block: small blocks cut the kinds apart, rows stay the same."""
    whole = _items(V2)
    lines = _items(V2, block_bytes=1)
    for cls, col in ((ProgressRecords, "entered"), (LinkStatRecords, "open_since_ns"),
                     (PortRecords, "t_ns"), (ConnRecords, "t_start_ns")):
        a = np.concatenate([getattr(i, col) for i in whole if isinstance(i, cls)])
        b = np.concatenate([getattr(i, col) for i in lines if isinstance(i, cls)])
        assert a.tolist() == b.tolist()
    assert sum(isinstance(i, PortRecords) for i in lines) == 2


def test_v1_and_v2_records_mix_in_one_block_and_in_order():
    data = (b'{"type":"meta","version":1}\n'
            b'{"type":"group","pg":"g","ranks":[0,1]}\n'
            b'{"type":"op","rank":0,"pg":"g","seq":0,"op":"all_reduce","bytes":8,'
            b'"t_enter_ns":5,"t_end_ns":9}\n'
            b'{"type":"progress","rank":0,"pg":"g","t_ns":10,"completed":0}\n'
            b'{"type":"conn","src":0,"dst":1,"bytes":8,"t_start_ns":6,"t_end_ns":8}\n'
            b'{"type":"linkstat","src":1,"dst":0,"t_ns":10,"window_ns":10,"transfers":1}\n'
            b'{"type":"rank","rank":1,"host":"h1"}\n'
            b'{"type":"port","host":"h1","nic":"h1/nic0","t_ns":11,"state":"up"}\n'
            + V2)
    items = _items(data)
    kinds = [type(i).__name__ for i in items]
    # the rank record splits the telemetry around it; the second meta is version 2's
    assert kinds[:2] == ["Meta", "GroupInfo"]
    first = kinds.index("RankInfo")
    assert sorted(kinds[2:first]) == ["Columns", "ConnRecords", "LinkStatRecords",
                                      "ProgressRecords"]
    assert items[first] == RankInfo(1, "h1")
    assert [i.sample for i in items if isinstance(i, Meta)] == [1, 8]
    assert sum(len(i) for i in items if isinstance(i, ProgressRecords)) == 4
    assert sum(len(i) for i in items if isinstance(i, PortRecords)) == 3
    assert sum(len(i) for i in items if isinstance(i, Columns)) == 1


def test_gzip_version_2_trace_reads_like_plain(tmp_path):
    plain, gz = tmp_path / "t.jsonl", tmp_path / "t.jsonl.gz"
    plain.write_bytes(V2)
    gz.write_bytes(gzip.compress(V2))
    a, b = list(read_trace(plain)), list(read_trace(gz))
    assert [type(i).__name__ for i in a] == [type(i).__name__ for i in b]
    assert _one(b, LinkStatRecords).busy_ns.tolist() == [800, 0]


# ----- unknown record types -------------------------------------------------------------------
UNKNOWN = (b'{"type":"gpu_temp","rank":0,"celsius":71}\n'
           b'{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}\n'
           b'{"type":"gpu_temp","rank":1,"celsius":70}\n'
           b'{"type":"Op","rank":0}\n'
           b'{"type":"progress","rank":0,"pg":"g","t_ns":3,"entered":0}\n'
           b'{"type":"gpu_temp","rank":0,"celsius":72}\n')


def _unknown_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "unknown type" in r.getMessage()]


@pytest.mark.parametrize("block_bytes", [1, 100, 4 << 20])
def test_unknown_types_are_skipped_with_one_warning_each(caplog, block_bytes):
    caplog.set_level(logging.WARNING)
    items = _items(UNKNOWN * 3, block_bytes)
    assert sum(len(i) for i in items if isinstance(i, Columns)) == 3
    assert sum(len(i) for i in items if isinstance(i, ProgressRecords)) == 3
    assert len(items) == sum(isinstance(i, (Columns, ProgressRecords)) for i in items)
    warned = _unknown_warnings(caplog)
    assert len(warned) == 2
    assert "v2.jsonl:1:" in warned[0] and "'gpu_temp'" in warned[0]
    assert "v2.jsonl:4:" in warned[1] and "'Op'" in warned[1]


def test_parallel_reader_skips_unknown_types_with_one_warning_each(caplog):
    caplog.set_level(logging.WARNING)
    items = list(read_blocks_parallel(io.BytesIO(UNKNOWN * 50), "p.jsonl", workers=1,
                                      block_bytes=256))
    assert sum(len(i) for i in items if isinstance(i, ProgressRecords)) == 50
    warned = _unknown_warnings(caplog)
    assert len(warned) == 2 and "p.jsonl:1:" in warned[0]


# ----- malformed records ----------------------------------------------------------------------
P = '{"type":"progress","rank":0,"pg":"g","t_ns":5'
L = '{"type":"linkstat","src":0,"dst":1,"t_ns":5,"window_ns":10'
T = '{"type":"port","host":"h","nic":"h/nic0","t_ns":5'
C = '{"type":"conn","src":0,"dst":1,"bytes":4,"t_start_ns":1'


@pytest.mark.parametrize(("line", "field", "words"), [
    ('{"type":"meta","version":1,"sample":4}', "sample", "only version 2 samples"),
    ('{"type":"meta","version":2,"sample":0}', "sample", "at least 1"),
    ('{"type":"meta","version":2,"sample":2.0}', "sample", "integer"),
    ('{"type":"meta","version":2,"sample":"4"}', "sample", "integer"),
    ('{"type":"meta","version":2,"sample":true}', "sample", "integer"),
    ('{"type":"meta","version":"2"}', "version", "integer"),
    ('{"type":"meta","version":3}', "version", "version 3"),
    (P + ',"entered":1.0}', "entered", "integer"),
    (P + ',"completed":-1}', "completed", "non-negative"),
    (P + ',"op":7}', "op", "operation name"),
    (P + ',"peer":"r1"}', "peer", "integer"),
    ('{"type":"progress","rank":-2,"pg":"g","t_ns":5}', "rank", "non-negative"),
    ('{"type":"progress","rank":0,"t_ns":5}', "pg", "communicator"),
    ('{"type":"progress","rank":0,"pg":"g"}', "t_ns", "integer"),
    (L + ',"transfers":-3}', "transfers", "non-negative"),
    (L + ',"bytes":1.5}', "bytes", "integer"),
    (L + ',"retrans":-1}', "retrans", "non-negative"),
    (L + ',"open_since_ns":"early"}', "open_since_ns", "integer"),
    (L + ',"path":"a>b"}', "path", "list of topology node ids"),
    (L + ',"path":["a",3]}', "path", "list of topology node ids"),
    (L + ',"pg":["g"]}', "pg", "communicator"),
    ('{"type":"linkstat","src":0,"dst":1,"t_ns":"5","window_ns":10}', "t_ns", "integer"),
    ('{"type":"linkstat","src":0,"dst":1,"t_ns":5}', "window_ns", "window_ns"),
    ('{"type":"linkstat","src":0,"dst":1,"t_ns":5,"window_ns":-10}', "window_ns",
     "non-negative"),
    ('{"type":"linkstat","src":0,"t_ns":5,"window_ns":10}', "dst", "dst"),
    (T + ',"state":"sideways"}', "state", "'up' or 'down'"),
    (T + '}', "state", "'up' or 'down'"),
    (T + ',"state":["up"]}', "state", "'up' or 'down'"),
    (T + ',"state":"up","rcv_errors":-4}', "rcv_errors", "non-negative"),
    (T + ',"state":"up","tx_bytes":18446744073709551615}', "tx_bytes", "64 bits"),
    ('{"type":"port","host":1,"nic":"n","t_ns":5,"state":"up"}', "host", "host id"),
    ('{"type":"port","host":"h","t_ns":5,"state":"up"}', "nic", "NIC id"),
    (C + ',"retrans":-2}', "retrans", "non-negative"),
    (C + ',"retrans":0.5}', "retrans", "integer"),
])
def test_bad_field_names_its_line_and_field(tmp_path, line, field, words):
    """The bad line among good lines of its own kind and others, in one block and alone."""
    path = tmp_path / "bad.jsonl"
    good = [P + ',"entered":0}', L + ',"transfers":1}', T + ',"state":"up","link_downed":0}',
            C + ',"retrans":0}']
    path.write_text("\n".join([*good, line, *good]) + "\n")
    for block in (4 << 20, 1):
        with pytest.raises(FormatError) as err:
            list(read_trace(path, block_bytes=block))
        assert (err.value.line, err.value.field) == (5, field), str(err.value)
        assert f"{path}:5" in str(err.value)
        assert words in str(err.value)


def test_fields_the_format_does_not_name_are_ignored():
    """c4 and other tools may add optional fields: any value there is no error."""
    items = _items(b'{"type":"linkstat","src":0,"dst":1,"t_ns":5,"window_ns":10,"mine":true,'
                   b'"more":[1,{"a":null}]}\n'
                   b'{"type":"port","host":"h","nic":"h/nic0","t_ns":5,"state":"up",'
                   b'"speed_gbps":400.0}\n')
    assert len(_one(items, LinkStatRecords)) == 1 and _one(items, PortRecords).counters == {}


@pytest.mark.parametrize("kind", ["op", "linkstat", "progress"])
def test_bad_record_after_a_rank_record_in_the_same_block_names_its_own_line(kind):
    """A rank or group record splits a block's telemetry into batches: the second batch's bad
    record is named by its line, not by the line of the first batch's record of its type."""
    good = {"op": '{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}',
            "linkstat": L + "}", "progress": P + "}"}[kind]
    bad = good.replace('"t_enter_ns":1', '"t_enter_ns":"x"').replace('"t_ns":5', '"t_ns":"x"')
    text = "\n".join([good, '{"type":"rank","rank":0,"host":"h"}', good, bad, good]) + "\n"
    with pytest.raises(FormatError) as err:
        _items(text.encode())
    assert err.value.line == 4 and err.value.field in ("t_ns", "t_enter_ns")
