"""The JSON file newer nccl-tests builds write with ``-J FILE`` (JSON_FILE_VERSION 2).

Its shape, from the writer in nccl-tests' src/util.cu: a top-level object with ``version``,
``args``, ``nccl_version`` (an NCCL_VERSION_CODE integer), ``config`` (run parameters and a
``devices`` list), ``results`` (one object per size with ``out_of_place`` and ``in_place``
objects, or null), ``out_of_bounds`` and ``average_bus_bandwidth``, ``errors``. Booleans are
written as the strings "true"/"false", ``root`` as a padded string, NaN as "nan".
"""

from __future__ import annotations

import os
from typing import Any

from c4.errors import FormatError
from diagnosis.probes.nccl_tests_records import (
    Device,
    Measurement,
    NcclTestsRun,
    SizeResult,
    version_of_code,
)

_CONFIG_KEYS = {"nthreads": "nThread", "ngpus": "nGpus", "minimum_bytes": "minBytes",
                "maximum_bytes": "maxBytes", "step_factor": "step_factor",
                "step_bytes": "step_bytes", "warmup_iters": "warmup_iters",
                "iterations": "iters", "aggregated_iterations": "agg_iters",
                "validation": "validation", "graph": "graph"}


def run_from_json(obj: Any, source: str = "") -> NcclTestsRun:
    """One run from the decoded JSON document."""
    try:
        return _run_from_json(obj, source)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        # a field of the wrong type (an object where a number belongs, NaN as a count, ...)
        raise FormatError(f"unexpected value in the JSON output ({type(exc).__name__}: "
                          f"{exc}); is this the file nccl-tests wrote with -J?",
                          source=source) from exc


def _run_from_json(obj: Any, source: str) -> NcclTestsRun:
    if not isinstance(obj, dict):
        raise FormatError("the JSON output is an object", source=source)
    if "results" not in obj:
        raise FormatError("missing: not an nccl-tests JSON output", source=source,
                          field="results")
    config = obj.get("config") or {}
    params: dict[str, int | str] = {}
    for key, name in _CONFIG_KEYS.items():
        if isinstance(config.get(key), (int, float)) and not isinstance(config[key], bool):
            params[name] = int(config[key])
    results = obj["results"] if isinstance(obj["results"], list) else None
    if results is None:
        raise FormatError("results must be a list", source=source, field="results")
    avg = obj.get("average_bus_bandwidth") or {}
    oob = obj.get("out_of_bounds") or {}
    args = obj.get("args") or []
    code = obj.get("nccl_version")
    return NcclTestsRun(
        test=os.path.basename(str(args[0])) if args else None,
        nccl_version=version_of_code(code) if isinstance(code, int) and code > 0 else None,
        params=params,
        devices=tuple(_device(d, i, source) for i, d in enumerate(config.get("devices") or [])),
        results=tuple(_result(r, i, source) for i, r in enumerate(results)),
        avg_busbw_GBps=_num(avg.get("bandwidth"), "average_bus_bandwidth.bandwidth", source),
        avg_busbw_ok=_bool(avg.get("okay")),
        out_of_bounds=int(oob["count"]) if isinstance(oob.get("count"), int) else None,
        out_of_bounds_ok=_bool(oob.get("okay")),
        errors=tuple(str(e) for e in obj.get("errors") or []),
        complete="average_bus_bandwidth" in obj)


def _device(d: Any, i: int, source: str) -> Device:
    if not isinstance(d, dict) or "rank" not in d:
        raise FormatError(f"config.devices[{i}] has no rank", source=source, field="devices")
    return Device(rank=int(d["rank"]), host=str(d.get("hostname", "")),
                  device=int(d.get("device", -1)), bus_id=str(d.get("device_hex", "")),
                  name=str(d.get("device_info", "")), pid=d.get("pid"), group=d.get("group"))


def _result(r: Any, i: int, source: str) -> SizeResult:
    where = f"results[{i}]"
    if not isinstance(r, dict):
        raise FormatError(f"{where} is not an object", source=source, field="results")
    for key in ("size", "count"):
        if not isinstance(r.get(key), int):
            raise FormatError(f"{where}.{key} is missing or not an integer", source=source,
                              field=key)
    root = str(r.get("root", "")).strip()
    return SizeResult(
        size_bytes=r["size"], count=r["count"], type=str(r.get("type", "")),
        redop=str(r.get("redop", "")), root=int(root) if root.lstrip("-").isdigit() else None,
        out_of_place=_measurement(r.get("out_of_place"), r.get("out_of_place_per_iter"),
                                  f"{where}.out_of_place", source),
        in_place=_measurement(r.get("in_place"), r.get("in_place_per_iter"),
                              f"{where}.in_place", source))


def _measurement(m: Any, it: Any, where: str, source: str) -> Measurement | None:
    if m is None:
        return None
    if not isinstance(m, dict):
        raise FormatError(f"{where} is not an object", source=source)
    time = m.get("time", m.get("cpu_time"))
    # Summary statistics of per-iteration timing (min_us, p99_us, cv_pct, ...); lists dropped.
    per_iter = {k: float(v) for k, v in (it or {}).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return Measurement(
        time_us=_num(time, f"{where}.time", source, required=True),  # type: ignore[arg-type]
        algbw_GBps=_num(m.get("alg_bw"), f"{where}.alg_bw", source, required=True),
        busbw_GBps=_num(m.get("bus_bw"), f"{where}.bus_bw", source, required=True),
        wrong=_num(m.get("nwrong"), f"{where}.nwrong", source), per_iter=per_iter)


def _num(x: Any, where: str, source: str, required: bool = False) -> float | None:
    if x is None and not required:
        return None
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, str) and x.lower() in ("nan", "-nan"):
        return float("nan")
    raise FormatError(f"{where} is {x!r}, not a number", source=source, field=where)


def _bool(x: Any) -> bool | None:
    if isinstance(x, bool):
        return x
    if x in ("true", "false"):
        return x == "true"
    return None  # "unchecked" or absent
