"""The nccl-tests parser on recorded outputs of real runs (fixtures/nccl_tests/SOURCES.md) and
on lines printed with the format strings of nccl-tests' own writer (src/util.cu)."""

# ruff: noqa: UP031  (printf-style on purpose: these are the C writer's format strings)

from __future__ import annotations

import math
from pathlib import Path

import pytest

from c4.errors import FormatError
from diagnosis.probes import NcclTestsRun, load_nccl_tests, parse_nccl_tests, parse_nccl_tests_run

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"


def _one(name: str) -> NcclTestsRun:
    (run,) = load_nccl_tests(FIXTURES / name)
    return run


def test_plain_output_two_hosts_of_eight_h100() -> None:
    run = _one("all_reduce_perf_2x8_h100.txt")
    assert run.ranks == 16 and run.hosts == ("ztan-mig-235z", "ztan-mig-gq73")
    assert run.devices[15].bus_id == "0000:8c:00" and run.devices[15].device == 7
    assert run.devices[8].name == "NVIDIA H100 80GB HBM3" and run.devices[8].pid == 6733
    assert run.params["maxBytes"] == 8589934592 and run.params["step_factor"] == 2
    assert len(run.results) == 31
    first, last = run.results[0], run.results[-1]
    assert (first.size_bytes, first.count, first.type, first.redop, first.root) == (
        8, 2, "float", "sum", -1)
    assert first.out_of_place.time_us == 135.8 and first.in_place.time_us == 123.5
    assert last.out_of_place.busbw_GBps == 338.82 and last.in_place.busbw_GBps == 337.35
    assert last.out_of_place.algbw_GBps == 180.71 and last.in_place.wrong == 0
    assert last.busbw_GBps == 338.82
    assert run.avg_busbw_GBps == pytest.approx(70.742) and run.avg_busbw_ok is None
    assert run.out_of_bounds == 0 and run.out_of_bounds_ok is True
    assert run.complete and not run.failed


def test_open_mpi_tagged_new_build() -> None:
    run = _one("all_gather_perf_ompi_tagged_v2_18.txt")
    assert run.test == "all_gather_perf_mpi"
    assert run.nccl_tests_version == "2.18.0" and run.nccl_version == "2.29.7"
    assert run.ranks == 2 and run.hosts == ("lab",)
    assert [r.size_bytes for r in run.results] == [1048576 * 2**i for i in range(8)]
    assert run.results[-1].out_of_place.time_us == 29073.8
    assert run.results[0].redop == "none"
    assert run.avg_busbw_GBps == pytest.approx(1.55649) and run.complete


def test_nccl_info_lines_of_every_rank_interleaved() -> None:
    run = _one("all_reduce_perf_ompi_nccl_info_efa.txt")
    assert run.nccl_version == "2.12.7+cuda11.4"
    assert run.hosts == ("test-nccl-efa-worker-0", "test-nccl-efa-worker-1")
    assert [d.bus_id for d in run.devices] == ["0x35", "0xf5"]
    assert len(run.results) == 31 and run.results[0].size_bytes == 0
    assert run.results[-1].size_bytes == 1073741824
    assert run.results[-1].in_place.busbw_GBps == 3.12
    assert run.avg_busbw_GBps == pytest.approx(1.15327)


def test_old_build_without_root_column() -> None:
    run = _one("all_reduce_perf_old_no_root_column.txt")
    assert run.params["step_bytes"] == 1048576 and "graph" not in run.params
    assert [d.group for d in run.devices] == [None, None, None]
    assert run.hosts == ("gpu01", "gpu02", "gpu03")
    r = run.results[0]
    assert r.root is None and r.redop == "sum" and r.out_of_place.time_us == 202872
    assert r.out_of_place.wrong is None and r.in_place.busbw_GBps == 0.62  # N/A: no check
    assert len(run.results) == 11 and run.avg_busbw_GBps == pytest.approx(0.58536)
    assert run.wrong == 0 and not run.failed


def test_srun_l_prefixed_output() -> None:
    run = _one("all_reduce_perf_srun_l_2x8_h100.txt")
    assert run.ranks == 16 and run.hosts == ("node005", "node007")
    assert run.params["validation"] == 0
    assert all(m.wrong is None for r in run.results for m in (r.out_of_place, r.in_place))
    assert run.results[-1].out_of_place.time_us == 103530
    assert run.avg_busbw_GBps == pytest.approx(142.735) and run.complete


def _prefixed(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


@pytest.mark.parametrize("prefix", [" 0: ", "0: ", "12: ", "[1,0]<stdout>:",
                                    "(head, rank=0, pid=3808) [1,0]<stdout>:"])
def test_launcher_prefixes_do_not_change_the_result(prefix: str) -> None:
    text = (FIXTURES / "all_reduce_perf_2x8_h100.txt").read_text()
    assert parse_nccl_tests(_prefixed(text, prefix)) == parse_nccl_tests(text)


def test_stderr_lines_of_open_mpi_are_ignored() -> None:
    text = (FIXTURES / "all_reduce_perf_2x8_h100.txt").read_text()
    noisy = _prefixed(text, "[1,0]<stdout>:") + "\n[1,3]<stderr>:  1  2  float  sum  -1  x\n"
    assert parse_nccl_tests(noisy) == parse_nccl_tests(text)


def test_several_runs_in_one_log() -> None:
    a = (FIXTURES / "all_gather_perf_ompi_tagged_v2_18.txt").read_text()
    b = (FIXTURES / "all_reduce_perf_old_no_root_column.txt").read_text()
    runs = parse_nccl_tests(a + "\n" + a + "\n" + b)
    assert [len(r.results) for r in runs] == [8, 8, 11]
    assert [r.test for r in runs] == ["all_gather_perf_mpi", "all_gather_perf_mpi", None]
    with pytest.raises(FormatError, match="3 runs in one output"):
        parse_nccl_tests_run(a + a + b)


def test_truncated_log_is_incomplete_not_an_error() -> None:
    lines = (FIXTURES / "all_reduce_perf_2x8_h100.txt").read_text().splitlines()
    run = parse_nccl_tests_run("\n".join(lines[:30]))
    assert not run.complete and len(run.results) == 7 and run.avg_busbw_GBps is None


# ---- lines printed with the writer's own format strings (nccl-tests src/util.cu) --------------

def _preamble(size: int, count: int, typ: str, op: str, root: int) -> str:
    return "%12li  %12li  %8s  %6s  %6s" % (size, count, typ, op, "%6i" % root)


def _body(t: float, alg: float, bus: float, wrong: int | None) -> str:
    if wrong is None:
        return "  %7s  %6s  %6s    N/A" % (f"{t:7.1f}", f"{alg:6.2f}", f"{bus:6.2f}")
    return "  %7s  %6s  %6s  %6g" % (f"{t:7.1f}", f"{alg:6.2f}", f"{bus:6.2f}", wrong)


_HEADER = ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
           % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
              "time", "algbw", "busbw", "#wrong", 0, ""))


def test_current_writer_with_failures_and_errors() -> None:
    text = "\n".join([
        "# nccl-tests version 2.17.6 nccl-headers=22803 nccl-library=22803",
        "# Collective test starting: sendrecv_perf",
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 5 "
        "agg iters: 1 validation: 1 graph: 0 unalign: 0",
        "#", "# Using devices",
        "#  Rank  0 Group  0 Pid   1234 on node-a b device  0 [0000:19:00] NVIDIA B200",
        "#", _HEADER,
        _preamble(8, 2, "float", "sum", -1) + _body(20.5, 0.0, 0.0, 0) + _body(20.1, 0, 0, 3),
        _preamble(16, 4, "float", "sum", -1) + _body(21.0, 0.0, 0.0, 0) + _body(20.9, 0, 0, 0),
        "# %-20s : %d %s" % ("Out of bounds values", 3, "FAILED"),
        "# %-20s : %g %s" % ("Avg bus bandwidth", 12.5, "FAILED"),
        "#", "# Collective test concluded: sendrecv_perf", "# error: remote process exited",
    ])
    run = parse_nccl_tests_run(text, source="log.txt")
    assert run.test == "sendrecv_perf" and run.nccl_version == "2.28.3"
    assert run.params["unalign"] == 0 and run.params["nGpus"] == 8
    assert run.devices[0].host == "node-a b"  # host names are %10s: spaces survive
    assert run.results[0].in_place.wrong == 3 and run.wrong == 3
    assert run.out_of_bounds == 3 and run.out_of_bounds_ok is False
    assert run.avg_busbw_ok is False and run.errors == ("remote process exited",)
    assert run.failed


def test_alltoall_in_place_without_check_and_in_place_only_rows() -> None:
    text = "\n".join([
        _HEADER,
        _preamble(8589934592, 536870912, "float", "none", -1)
        + _body(10308, 833.31, 624.98, 0) + _body(9568.2, 897.76, 673.32, None),
        # the writer's null body: out-of-place left blank (trace replay)
        _preamble(1024, 256, "float", "none", -1) + " " * 32 + _body(9.0, 0.11, 0.1, 0),
        "# Avg bus bandwidth    : 381.478",
    ])
    a, b = parse_nccl_tests_run(text).results
    assert a.out_of_place.wrong == 0 and a.in_place.wrong is None
    assert b.out_of_place is None and b.in_place.time_us == 9.0


def test_per_iteration_and_timestamp_columns() -> None:
    head = ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  "
            "%6s  %6s  %7s  %7s  %7s  %7s %*s" % (
                "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                "i_min", "i_max", "i_p99", "i_cv%", "time", "algbw", "busbw", "#wrong",
                "i_min", "i_max", "i_p99", "i_cv%", 19, "timestamp"))
    it = "  %7s  %7s  %7s  %7s" % ("10.10", "12.30", "12.20", "4.50")
    row = (_preamble(1048576, 262144, "float", "sum", -1) + _body(11.0, 95.3, 178.7, 0) + it
           + _body(10.9, 96.2, 180.4, 0) + it + "%21s" % "2026-03-10 10:00:01")
    (r,) = parse_nccl_tests_run(head + "\n" + row).results
    assert r.out_of_place.time_us == 11.0 and r.in_place.busbw_GBps == 180.4
    assert r.in_place.per_iter == {"min_us": 10.1, "max_us": 12.3, "p99_us": 12.2,
                                   "cv_pct": 4.5}


def test_json_output() -> None:
    (run,) = load_nccl_tests(FIXTURES / "all_gather_perf_v2.json")
    assert run.test == "all_gather_perf_mpi" and run.nccl_version == "2.29.7"
    assert run.params["iters"] == 50 and run.hosts == ("lab",) and run.ranks == 2
    a, b = run.results
    assert a.root == -1 and a.out_of_place.busbw_GBps == 0.24 and a.in_place.wrong == 0
    assert b.out_of_place is None and b.in_place.wrong is None
    assert run.avg_busbw_GBps == 0.36 and run.avg_busbw_ok is None
    assert run.out_of_bounds_ok is True and run.complete and not run.failed
    # the same numbers as the console log of that run
    text_run = _one("all_gather_perf_ompi_tagged_v2_18.txt")
    assert a.out_of_place == text_run.results[0].out_of_place


def test_json_nan_and_bad_fields() -> None:
    doc = (FIXTURES / "all_gather_perf_v2.json").read_text()
    run = parse_nccl_tests(doc.replace('"bus_bw":0.240000', '"bus_bw":"nan"'))[0]
    assert math.isnan(run.results[0].out_of_place.busbw_GBps)
    with pytest.raises(FormatError, match=r"results\[0\]\.out_of_place\.alg_bw is 'x'"):
        parse_nccl_tests(doc.replace('"alg_bw":0.480000', '"alg_bw":"x"', 1), source="r.json")
    with pytest.raises(FormatError, match=r"^r\.json:1: not valid JSON"):
        parse_nccl_tests(doc[:200], source="r.json")
    with pytest.raises(FormatError, match="field 'results'"):
        parse_nccl_tests('{"version": 2}')


# ---- malformed input ---------------------------------------------------------------------------

def test_malformed_row_names_line_and_column() -> None:
    lines = (FIXTURES / "all_reduce_perf_2x8_h100.txt").read_text().splitlines()
    lines[24] = lines[24].replace("123.2", "12x.2")
    with pytest.raises(FormatError, match=r"^out\.txt:25 \(field 'time'\): time is '12x\.2'"):
        parse_nccl_tests("\n".join(lines), source="out.txt")
    lines = (FIXTURES / "all_reduce_perf_2x8_h100.txt").read_text().splitlines()
    lines[30] = lines[30].rsplit(None, 2)[0]
    with pytest.raises(FormatError, match=r"^out\.txt:31: expected 13 columns .* found 11"):
        parse_nccl_tests("\n".join(lines), source="out.txt")


def test_rows_without_a_header_and_empty_output() -> None:
    # a bare table row of the usual 13 columns is read; an odd one is refused
    row = "   8   2   float   sum   -1   135.8  0.00  0.00  0  123.5  0.00  0.00  0"
    (run,) = parse_nccl_tests(row)
    assert run.results[0].in_place.time_us == 123.5
    with pytest.raises(FormatError, match=r"^x:1: result line with 7 columns and no column"):
        parse_nccl_tests("   8   2   float   sum   -1   135.8  0.00", source="x")
    with pytest.raises(FormatError, match="no nccl-tests output found"):
        parse_nccl_tests("Authorization required\n\nsome other log line\n")
