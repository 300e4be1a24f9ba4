"""Reading Flight Recorder dumps: real gloo dumps in both encodings, bad files, odd names."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from c4.errors import FormatError
from diagnosis.errors import DiagnosisError
from diagnosis.flight_recorder import load_dump, load_dumps
from diagnosis.flight_recorder.dumps import find_dump_files, rank_of_file, safe_unpickle

FIXTURE = Path(__file__).parent / "fixtures" / "gloo_hang_4ranks"


def test_real_pickle_and_json_dumps_read_the_same() -> None:
    pick = load_dumps(FIXTURE / "pickle")
    js = load_dumps(FIXTURE / "json")
    assert [d.rank for d in pick] == [0, 1, 2, 3]
    assert [d.version for d in pick] == ["2.10"] * 4
    assert pick[2].source == "nccl_trace_rank_2" and js[2].source == "fr_trace_2.json"
    for p, j in zip(pick, js):
        assert p.entries == j.entries  # JSON's 0 times and list process groups normalise alike
    e = pick[2].entries[-1]
    assert (e.pg, e.pg_desc, e.seq, e.op, e.backend, e.state) == (
        "1", "undefined", 1, "all_reduce", "gloo", "scheduled")
    assert e.input_sizes == ((16,),) and e.input_dtypes == ("Float",)
    assert e.time_created_ns and e.time_started_ns is None and e.time_completed_ns is None
    # gloo's pg_config is keyed by '' (ranks '[]' or the world): nothing usable survives
    assert all(d.pg_config == {} for d in pick)


def test_restricted_unpickler_refuses_code(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    f = tmp_path / "rank_0"
    f.write_bytes(pickle.dumps({"version": "2.10", "entries": [Evil()]}))
    with pytest.raises(FormatError, match=r"rank_0.*refusing to load (posix|os)\.system"):
        load_dump(f, 0)
    assert not (tmp_path / "pwned").exists()
    # plain containers, sets included, still load
    assert safe_unpickle(pickle.dumps({"a": {1, 2}, "b": (1, None)})) == {"a": {1, 2},
                                                                          "b": (1, None)}


def test_truncated_pickle_names_the_file(tmp_path: Path) -> None:
    data = (FIXTURE / "pickle" / "nccl_trace_rank_1").read_bytes()
    (tmp_path / "nccl_trace_rank_1").write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match=r"^nccl_trace_rank_1: .*truncated"):
        load_dumps(tmp_path)


def test_truncated_json_names_file_and_line(tmp_path: Path) -> None:
    text = (FIXTURE / "json" / "fr_trace_0.json").read_text()
    (tmp_path / "fr_trace_0.json").write_text(text.replace(",", ",\n")[:700])
    with pytest.raises(FormatError, match=r"^fr_trace_0\.json:\d+: not valid JSON"):
        load_dumps(tmp_path)


def test_empty_file_is_a_format_error(tmp_path: Path) -> None:
    (tmp_path / "trace3").write_bytes(b"")
    with pytest.raises(FormatError, match="trace3: empty dump"):
        load_dumps(tmp_path)


@pytest.mark.parametrize("field", ["profiling_name", "collective_seq_id", "state",
                                   "process_group"])
def test_missing_entry_field_is_named(tmp_path: Path, field: str) -> None:
    dump = pickle.loads((FIXTURE / "pickle" / "nccl_trace_rank_0").read_bytes())
    del dump["entries"][1][field]
    if field == "process_group":
        del dump["entries"][1]["pg_id"]
    (tmp_path / "r0").write_bytes(pickle.dumps(dump))
    with pytest.raises(FormatError, match=rf"r0 \(field '{field}'\): missing in entries\[1\]"):
        load_dumps(tmp_path)


def test_missing_version_and_wrong_types(tmp_path: Path) -> None:
    (tmp_path / "r0.json").write_text(json.dumps({"entries": []}))
    with pytest.raises(FormatError, match=r"r0\.json \(field 'version'\): missing"):
        load_dumps(tmp_path)
    (tmp_path / "r0.json").write_text(json.dumps([1, 2]))
    with pytest.raises(FormatError, match=r"r0\.json: a dump is a dict"):
        load_dumps(tmp_path)
    (tmp_path / "r0.json").write_text(json.dumps({"version": "2.10", "entries": {}}))
    with pytest.raises(FormatError, match="field 'entries'"):
        load_dumps(tmp_path)


def test_older_seq_id_field_and_unknown_major_version(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    dump = json.loads((FIXTURE / "json" / "fr_trace_0.json").read_text())
    dump["version"] = "3.0"
    for e in dump["entries"]:
        e["seq_id"] = e.pop("collective_seq_id")
    (tmp_path / "rank0.json").write_text(json.dumps(dump))
    (d,) = load_dumps(tmp_path)
    assert [e.seq for e in d.entries] == [1, 2, 3]
    assert "expected 2.x" in caplog.text


@pytest.mark.parametrize(("name", "parsed"), [
    ("nccl_trace_rank_12", ("nccl_trace_rank_", 12, "")),
    ("fr-7.pkl", ("fr-", 7, ".pkl")),
    ("dump.rank3.json", ("dump.rank", 3, ".json")),
    ("5", ("", 5, "")),
    ("README.md", None),
    ("trace_3.txt.gz", None),
])
def test_file_names(name: str, parsed: tuple | None) -> None:
    assert rank_of_file(name) == parsed


def test_directory_choice(tmp_path: Path) -> None:
    with pytest.raises(DiagnosisError, match="no Flight Recorder dumps"):
        find_dump_files(tmp_path)
    with pytest.raises(DiagnosisError, match="not a directory"):
        find_dump_files(tmp_path / "nope")
    (tmp_path / "README.md").write_text("notes")
    with pytest.raises(DiagnosisError, match="no Flight Recorder dumps"):
        find_dump_files(tmp_path)
    # the same dumps in both encodings: the pickles win
    for f in (FIXTURE / "pickle").iterdir():
        shutil.copy(f, tmp_path / f"fr_{f.name.rsplit('_', 1)[1]}.pkl")
    for f in (FIXTURE / "json").iterdir():
        shutil.copy(f, tmp_path / f"fr_{f.name.rsplit('_', 1)[1]}")
    files = find_dump_files(tmp_path)
    assert sorted(files) == [0, 1, 2, 3] and all(f.suffix == ".pkl" for f in files.values())
    # two different prefixes: ambiguous unless one is chosen
    shutil.copy(FIXTURE / "pickle" / "nccl_trace_rank_0", tmp_path / "other0")
    with pytest.raises(DiagnosisError, match=r"several sets of dumps.*other<rank>"):
        find_dump_files(tmp_path)
    assert list(find_dump_files(tmp_path, prefix="other")) == [0]
