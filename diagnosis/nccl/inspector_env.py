"""The environment that turns NCCL's Inspector on for a job (``c4 run --nccl-inspector``).

Without a dump interval the Inspector starts no dump thread and writes nothing (its README says
-1 writes at teardown; the code does not), so one is always set. c4 also needs every call
(``DUMP_MIN_SIZE_BYTES=0``: by default calls under 8 KiB are left out, and with them the
numbering c4 relies on), per-call times (``DUMP_VERBOSE=1``: without them an operation is
known only to have ended before its dump), and rings large enough not to drop calls between
two dumps. Values the user already set are kept, except a dump interval that writes nothing.
"""

from __future__ import annotations

import os

__all__ = ["DUMP_INTERVAL_US", "inspector_environment"]

#: c4's dump interval: a call is on disk at most this long after it ended
DUMP_INTERVAL_US = 100_000

_DEFAULTS = {
    "NCCL_INSPECTOR_ENABLE": "1",
    "NCCL_INSPECTOR_DUMP_VERBOSE": "1",
    "NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES": "0",
    "NCCL_INSPECTOR_DUMP_COLL_RING_SIZE": "4096",
    "NCCL_INSPECTOR_DUMP_P2P_RING_SIZE": "4096",
}


def inspector_environment(env: dict[str, str], dump_dir: str | None, plugin: str | None,
                          job: str | None) -> list[str]:
    """Set the Inspector's variables in ``env``; returns notes for the user (values of theirs
    that were changed)."""
    notes: list[str] = []
    for k, v in _DEFAULTS.items():
        env.setdefault(k, v)
    interval = env.get("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "")
    try:
        bad = int(interval) < 0
    except ValueError:
        bad = True
    if bad:
        if interval:
            notes.append(f"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS={interval} writes "
                         f"nothing: set to {DUMP_INTERVAL_US}")
        env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = str(DUMP_INTERVAL_US)
    if env.get("NCCL_INSPECTOR_DUMP_THREAD_ENABLE", "1") == "0":
        notes.append("NCCL_INSPECTOR_DUMP_THREAD_ENABLE=0 writes nothing: set to 1")
        env["NCCL_INSPECTOR_DUMP_THREAD_ENABLE"] = "1"
    if env.get("NCCL_INSPECTOR_PROM_DUMP", "0") not in ("0", ""):
        notes.append("NCCL_INSPECTOR_PROM_DUMP is on: the Inspector writes Prometheus "
                     "aggregates instead of per-call lines, which c4 cannot diagnose from")
    if dump_dir is None:
        dump_dir = env.get("NCCL_INSPECTOR_DUMP_DIR") or os.path.abspath(
            f"nccl-inspector-{job or env.get('C4_JOB') or env.get('SLURM_JOB_ID') or 'job'}")
    env["NCCL_INSPECTOR_DUMP_DIR"] = str(dump_dir)
    if plugin is not None:
        env["NCCL_PROFILER_PLUGIN"] = plugin
    else:
        env.setdefault("NCCL_PROFILER_PLUGIN", "inspector")   # libnccl-profiler-inspector.so
    notes.append(f"NCCL Inspector writes into {dump_dir} (c4 analyze --nccl-inspector "
                 f"{dump_dir})")
    return notes
