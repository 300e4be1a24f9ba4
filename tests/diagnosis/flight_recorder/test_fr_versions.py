"""Format versions 2.2 to 2.10, pickle and JSON, and dumps that are damaged.

No job here can write an NCCL dump or an old format version (torch 2.13 on CPU writes 2.10 from
gloo only), so these dumps are constructed to torch's format (torch_format.py) and checked
against the reader that ships with torch where it is installed.
"""

from __future__ import annotations

import copy
import json
import pickle
import random
from pathlib import Path

import pytest

from c4.errors import FormatError
from diagnosis.flight_recorder import analyze_dumps, load_dump, load_dumps
from diagnosis.flight_recorder.dumps import safe_unpickle
from tests.diagnosis.flight_recorder.torch_format import VERSIONS, Recorder, world, write


def _hang_job() -> list[Recorder]:
    """4 ranks: all_reduces, a subgroup {2, 3}, a batched send/recv 0 -> 1, then ranks 0-2
    start all_reduce #5 on the world group and rank 3 never calls it."""
    recs = world(4)
    for rec in recs[2:]:
        rec.group("1", [2, 3], desc="pp")
    for _ in range(3):
        for rec in recs:
            rec.collective("0")
    recs[0].batch("0", [("send", 1)])
    recs[1].batch("0", [("recv", 0)])
    for rec in recs[2:]:
        rec.collective("1", sizes=((4, 8),), dtype="BFloat16")
    for rec in recs:
        rec.collective("0")
    for rec in recs[:3]:
        rec.collective("0", state="started")
    return recs


@pytest.mark.parametrize("encoding", ["pickle", "json"])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_and_encoding_reads_and_analyses_alike(tmp_path: Path, version: str,
                                                             encoding: str) -> None:
    """Constructed to torch's format (no NCCL here), in each version's field set."""
    recs = _hang_job()
    dumps = load_dumps(write(recs, tmp_path, version=version, encoding=encoding))
    assert [d.version for d in dumps] == [version] * 4
    d0 = dumps[0]
    assert [e.op for e in d0.entries] == ["all_reduce"] * 3 + ["send", "coalesced"] + [
        "all_reduce"] * 2
    # the entry closing the batch is point-to-point even where the dump has no is_p2p (2.2)
    assert [e.is_p2p for e in d0.entries] == [False] * 3 + [True, True] + [False] * 2
    assert d0.entries[-1].state == "started" and d0.entries[0].time_completed_ns
    assert d0.entries[3].peer == "0->1" and d0.entries[3].p2p_seq == 1
    assert dumps[2].entries[3].input_dtypes == ("BFloat16",)
    assert dumps[2].pg_config == {"0": (0, 1, 2, 3), "1": (2, 3)}
    if version != "2.2":
        assert dumps[0].pg_status["0"]["last_enqueued_collective"] == 5
    (hang,) = analyze_dumps(tmp_path)
    assert hang.kind == "noncomm_hang" and [s.rank for s in hang.suspects] == [3]
    assert (hang.pg, hang.seq) == ("0", 5)


def test_constructed_dumps_are_read_by_torchs_own_loader(tmp_path: Path) -> None:
    """Dumps constructed to torch's format (no NCCL here) are checked against torch's reader
    and operation parser, where torch is installed: were they not torch's format, torch would
    reject them."""
    loader = pytest.importorskip("torch.distributed.flight_recorder.components.loader")
    types = pytest.importorskip("torch.distributed.flight_recorder.components.types")
    write(_hang_job(), tmp_path)
    for rank in range(4):
        d = loader.read_dump("nccl_trace_rank_", str(tmp_path / f"nccl_trace_rank_{rank}"))
        assert d["rank"] == rank and d["version"] == "2.10"
        members = {name: set(json.loads(c["ranks"])) for name, c in d["pg_config"].items()}
        for e in d["entries"]:
            op = types.Op(e, members, e["process_group"][0])
            assert op.type in types.COLLECTIVES | types.P2P | {"coalesced"}


def test_a_rank_that_recorded_nothing_has_no_entries_key_in_json(tmp_path: Path) -> None:
    """torch's JSON writer leaves ``entries`` out when there are none (constructed)."""
    recs = world(2)
    write(recs, tmp_path, encoding="json")
    assert "entries" not in json.loads((tmp_path / "nccl_trace_rank_0.json").read_text())
    assert [d.entries for d in load_dumps(tmp_path)] == [(), ()]
    assert analyze_dumps(tmp_path) == []


def test_torch_pickler_list_helpers_are_answered_without_importing_anything() -> None:
    # GLOBAL torch.jit._pickle.build_intlist applied to [1, 2], as TorchScript pickles lists
    data = b"\x80\x02ctorch.jit._pickle\nbuild_intlist\n](K\x01K\x02e\x85R."
    assert safe_unpickle(data) == [1, 2]
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        safe_unpickle(b"\x80\x02ctorch.jit._pickle\nsomething_else\n](e\x85R.")


def _dump_with(tmp_path: Path, field: str, value: object, encoding: str = "pickle") -> Path:
    recs = world(2)
    for rec in recs:
        rec.collective("0")
        rec.collective("0")
    recs[1].entries[1][field] = value
    return write(recs, tmp_path, encoding=encoding)


@pytest.mark.parametrize(("field", "value", "why"), [
    ("process_group", {"name": "0"}, "expected (name, description)"),
    ("input_sizes", "16", "tensor sizes are a list"),
    ("output_sizes", [[16, "x"]], "tensor sizes hold a str"),
    ("collective_seq_id", None, "bad value: null"),
    ("collective_seq_id", "two", "not a whole number"),
    ("record_id", 1e400, "not a whole number"),
    ("state", 3, "expected text"),
    ("profiling_name", None, "expected text"),
    ("profiling_name", "nccl:", "no operation named"),
    ("input_dtypes", [1], "dtypes are a list of names"),
    ("is_p2p", "yes", "expected true or false"),
    ("time_created_ns", [1], "expected a whole number"),
    ("duration_ms", "fast", "not a number"),
])
@pytest.mark.parametrize("encoding", ["pickle", "json"])
def test_bad_field_names_file_field_and_entry(tmp_path: Path, field: str, value: object,
                                              why: str, encoding: str) -> None:
    """A dump constructed to torch's format (no NCCL here) with one field of one entry
    damaged: the error names the file, the field and the entry."""
    if encoding == "json" and isinstance(value, float):
        pytest.skip("JSON has no infinity")
    _dump_with(tmp_path, field, value, encoding)
    name = "nccl_trace_rank_1" + (".json" if encoding == "json" else "")
    with pytest.raises(FormatError) as exc:
        analyze_dumps(tmp_path)
    msg = str(exc.value)
    assert msg.startswith(f"{name} (field '{field}'): ") and "in entries[1]" in msg, msg
    assert why in msg


def test_entry_that_is_not_a_dict_and_garbage_config_or_status(tmp_path: Path) -> None:
    """A dump constructed to torch's format (no NCCL here): an unusable pg_config or pg_status
    is ignored (gloo writes the former wrong), an entry that is not a dict is an error."""
    recs = world(2)
    for rec in recs:
        rec.collective("0")
    d = recs[0].dump_dict()
    d["pg_config"] = {"0": "nonsense", "1": {"ranks": "[0, 'a']"}, "2": {"ranks": "[[["}}
    d["pg_status"] = ["not", "a", "dict"]
    (tmp_path / "r0").write_bytes(pickle.dumps(d))
    dump = load_dump(tmp_path / "r0", 0)
    assert dump.pg_config == {} and dump.pg_status == {} and len(dump.entries) == 1
    d["entries"].append(["not", "an", "entry"])
    (tmp_path / "r0").write_bytes(pickle.dumps(d))
    with pytest.raises(FormatError, match=r"^r0 \(field 'entries'\): entries\[1\] is list"):
        load_dump(tmp_path / "r0", 0)


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9, 0.99])
def test_truncated_constructed_dumps_are_format_errors(tmp_path: Path, cut: float) -> None:
    """Dumps constructed to torch's format (no NCCL here), cut short as by a rank that died
    while writing."""
    recs = _hang_job()
    for encoding in ("pickle", "json"):
        data = recs[0].dump(encoding=encoding)
        f = tmp_path / ("nccl_trace_rank_0" + (".json" if encoding == "json" else ""))
        f.write_bytes(data[: int(len(data) * cut)])
        with pytest.raises(FormatError, match=rf"^{f.name}\b.*(truncated|missing)"):
            load_dump(f, 0)


@pytest.mark.parametrize("version", [None, {"major": 2}, [2, 10], True])
def test_version_that_is_not_a_version_is_a_format_error(tmp_path: Path, version: object) -> None:
    """A dump constructed to torch's format (no NCCL here) whose version is not text."""
    d = world(1)[0].dump_dict()
    d["version"] = version
    (tmp_path / "r0").write_bytes(pickle.dumps(d))
    with pytest.raises(FormatError, match=r"^r0 \(field 'version'\): bad value"):
        load_dump(tmp_path / "r0", 0)


_ODD_VALUES = [None, 0, -1, 2**70, 1.5, float("nan"), "", "x", "nccl:", "nccl:send 0->9",
               "nccl:recv 9<-0", "nccl:send a->b", "nccl:coalesced", [], [[]], [[1, 2]], {},
               {"a": 1}, ("0",), ("0", "d", "e"), True, "[0, 1]", "[", [None], "started"]


def test_damaged_dumps_give_reports_or_a_format_error_never_a_crash(tmp_path: Path) -> None:
    """Seeded random damage to the fields of constructed dumps (torch's format): the analysis
    either reads them or says which file and field is wrong; nothing else escapes."""
    base = [rec.dump_dict() for rec in _hang_job()]
    rng = random.Random(20240611)
    for it in range(150):
        dumps = copy.deepcopy(base)
        for _ in range(rng.randint(1, 4)):
            d = rng.choice(dumps)
            if rng.random() < 0.15:
                d[rng.choice(["version", "pg_config", "pg_status", "entries"])] = rng.choice(
                    _ODD_VALUES)
            elif isinstance(d.get("entries"), list) and d["entries"]:
                e = rng.choice(d["entries"])
                if isinstance(e, dict):
                    key = rng.choice(sorted(e))
                    if rng.random() < 0.15:
                        del e[key]
                    else:
                        e[key] = rng.choice([*_ODD_VALUES, rng.randint(-3, 30)])
        out = tmp_path / str(it)
        out.mkdir()
        for rank, d in enumerate(dumps):
            (out / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(d))
        try:
            analyze_dumps(out)
        except FormatError as exc:
            assert str(exc).startswith("nccl_trace_rank_")
