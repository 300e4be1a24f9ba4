"""Fuzz the file parsers: topology (Topology.from_json / load), Flight Recorder dumps (pickle
and JSON, then the analyzer), nccl-tests output (console logs and the -J JSON). The only
acceptable outcomes are a result or the package's documented error (FormatError,
TopologyError, DiagnosisError)."""

from __future__ import annotations

import contextlib
import json
import pickle
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from c4.errors import FormatError
from c4.topology import Topology, TopologyError
from c4.topology.builders import rail_optimized
from diagnosis.errors import DiagnosisError
from diagnosis.flight_recorder import analyze
from diagnosis.flight_recorder.dumps import load_dump
from diagnosis.probes import parse_nccl_tests
from tests.fuzz.fuzzkit import fuzz, json_values, mutate, mutate_json

HERE = Path(__file__).resolve().parent
FR = HERE.parent / "diagnosis" / "flight_recorder" / "fixtures" / "gloo_hang_4ranks"
NCCL = HERE.parent / "diagnosis" / "probes" / "fixtures" / "nccl_tests"

TOPO = rail_optimized(2, 2).to_json()
FR_JSON = [json.loads(p.read_text()) for p in sorted((FR / "json").iterdir())]
FR_PICKLES = [p.read_bytes() for p in sorted((FR / "pickle").iterdir())]
NCCL_TEXTS = [p.read_text(errors="replace") for p in sorted(NCCL.iterdir())
              if p.suffix in (".txt", ".json")]


# ----- topology ------------------------------------------------------------------------------
def _use_topology(obj) -> None:
    try:
        topo = Topology.from_json(obj, source="fuzz.json")
    except FormatError as exc:
        assert "fuzz.json" in str(exc)
        return
    try:   # what the CLI and the engine ask of a topology they accepted
        topo.hosts(), topo.links(), topo.switches()
        nics = topo.nics()
        for gpu in topo.gpus()[:4]:
            topo.nic_of_gpu(gpu)
        if len(nics) >= 2:
            topo.paths(nics[0], nics[-1])
    except TopologyError:
        pass


@fuzz(200)
@given(st.data())
def test_topology_mutated(data):
    _use_topology(mutate_json(TOPO, data.draw))


@fuzz(100)
@given(json_values)
def test_topology_made_up(obj):
    _use_topology(obj)


@fuzz(100)
@given(st.data())
def test_topology_file_bytes(data):
    raw = mutate(json.dumps(TOPO).encode(), data.draw)
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        fh.write(raw)
        fh.flush()
        with contextlib.suppress(FormatError):
            Topology.load(fh.name)


# ----- Flight Recorder -----------------------------------------------------------------------
def _load(raw: bytes, rank: int):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"fr_trace_{rank}"
        path.write_bytes(raw)
        try:
            return load_dump(path, rank)
        except FormatError:
            return None


def _analyze(dumps) -> None:
    dumps = [d for d in dumps if d is not None]
    if dumps:
        with contextlib.suppress(DiagnosisError):
            analyze(dumps)


@fuzz(150)
@given(st.data())
def test_flight_recorder_json_mutated(data):
    which = data.draw(st.integers(0, len(FR_JSON) - 1))
    dumps = [_load(json.dumps(mutate_json(obj, data.draw) if i == which else obj).encode(), i)
             for i, obj in enumerate(FR_JSON)]
    _analyze(dumps)


@fuzz(150)
@given(st.data())
def test_flight_recorder_pickle_mutated(data):
    which = data.draw(st.integers(0, len(FR_PICKLES) - 1))
    raw = [mutate(p, data.draw) if i == which else p for i, p in enumerate(FR_PICKLES)]
    _analyze([_load(r, i) for i, r in enumerate(raw)])


@fuzz(100)
@given(st.data())
def test_flight_recorder_pickle_of_other_data(data):
    # a structurally edited dump pickled again, or any plain data at all
    obj = mutate_json(pickle.loads(FR_PICKLES[0]), data.draw) if data.draw(st.booleans()) \
        else data.draw(json_values)
    _analyze([_load(pickle.dumps(obj, protocol=data.draw(st.integers(0, 5))), 0)])


def test_flight_recorder_refuses_code():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    assert _load(pickle.dumps(Evil()), 0) is None


# ----- nccl-tests ----------------------------------------------------------------------------
def _parse(text: str) -> None:
    try:
        runs = parse_nccl_tests(text, source="fuzz.log")
    except FormatError as exc:
        assert "fuzz.log" in str(exc)
        return
    assert isinstance(runs, list)


@fuzz(200)
@given(st.data())
def test_nccl_tests_mutated_lines(data):
    text = data.draw(st.sampled_from([t for t in NCCL_TEXTS if not t.lstrip().startswith("{")]))
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 5))):
        if not lines:
            break
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(("drop", "dup", "token", "cut")))
        if action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, lines[data.draw(st.integers(0, len(lines) - 1))])
        elif action == "token":
            tokens = lines[i].split(" ")
            j = data.draw(st.integers(0, len(tokens) - 1))
            tokens[j] = data.draw(st.sampled_from(("N/A", "nan", "-1", "1e999", "", "#", "x",
                                                   "99999999999999999999", "time", "size")))
            lines[i] = " ".join(tokens)
        else:
            lines[i] = lines[i][:data.draw(st.integers(0, len(lines[i])))]
    _parse("\n".join(lines))


@fuzz(150)
@given(st.data())
def test_nccl_tests_mutated_bytes(data):
    text = data.draw(st.sampled_from(NCCL_TEXTS))
    _parse(mutate(text.encode(), data.draw).decode(errors="replace"))


@fuzz(150)
@given(st.data())
def test_nccl_tests_json_mutated(data):
    docs = [json.loads(t) for t in NCCL_TEXTS if t.lstrip().startswith("{")]
    _parse(json.dumps(mutate_json(data.draw(st.sampled_from(docs)), data.draw)))
