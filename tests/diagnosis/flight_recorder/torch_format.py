"""Flight Recorder dumps written the way torch's writer writes them, for what no job here can make.

This machine has no GPU and no NCCL, and gloo on torch 2.13 records neither point-to-point calls
nor any state past ``scheduled``. The cases of an NCCL job (started/completed states, send/recv,
coalesced groups, a working ``pg_config``) are therefore built here, field for field, to torch's
format: the writer (``FlightRecorderDetail.hpp``: ``getCollectiveTrace``, ``dump_json``,
``getPgConfig``, ``getPgStatus``) and the reader that ships with torch
(``torch/distributed/flight_recorder/components``). A :class:`Recorder` keeps the counters one
rank's ``ProcessGroupNCCL`` keeps:

* ``record_id``: one counter per process, over every group; the ring buffer keeps the last
  ``max_entries`` entries and dumps them oldest first.
* ``collective_seq_id``: per group, bumped once per collective or per coalesced group (whose
  entries and closing ``nccl:coalesced`` entry all carry it); point-to-point entries carry its
  current value without bumping it.
* ``p2p_seq_id``: per group, bumped once per send/recv or per batch (``batch_isend_irecv``),
  over all peers alike: it is not a per-pair counter.
* ``op_id``: per group, one per logical operation (coalesced members included).
* ``pg_id``: a per-process counter of the groups this rank constructed (non-members construct
  nothing), so it differs across ranks.
* ``send a->b`` / ``recv b<-a`` name group-local ranks (the index in the sorted member list).
* Members of a coalesced group are recorded without CUDA events: they stay ``scheduled``; the
  closing entry carries the group's state.

Field sets by version: every version carries what torch's own analyzer reads (``record_id``,
``process_group``, ``collective_seq_id``, ``p2p_seq_id``, ``profiling_name``, sizes, dtypes,
``state``, ``time_created_ns``); ``is_p2p``, ``timeout_ms`` and ``pg_status`` are absent before
2.3, ``thread_name``/``thread_id`` before 2.6; 2.7 names the library version ``nccl_version``,
later versions ``comm_lib_version``.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from typing import Any

VERSIONS = ("2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10")
T0 = 1_750_000_000_000_000_000  # ns since the epoch, like c10::getTime()
STEP = 1_000_000  # 1 ms between recorded calls


def _minor(version: str) -> int:
    return int(version.split(".")[1])


@dataclass
class Clock:
    """The job's wall clock: every recorded call moves it on, so ranks interleave in time."""

    now: int = T0

    def tick(self) -> int:
        self.now += STEP
        return self.now


@dataclass
class _Group:
    name: str
    desc: str
    ranks: tuple[int, ...]
    pg_id: int
    seq_coll: int = 0
    seq_p2p: int = 0
    op_id: int = 0
    last_started: int = -1
    last_completed: int = -1


@dataclass
class Recorder:
    """One rank's Flight Recorder, fed call by call."""

    rank: int
    backend: str = "nccl"
    max_entries: int = 2000
    timeout_ms: int = 600_000
    # TORCH_NCCL_ENABLE_TIMING: without it no start event is recorded, so no entry is ever
    # "started" and no duration is measured.
    timing: bool = True
    entries: list[dict] = field(default_factory=list)
    groups: dict[str, _Group] = field(default_factory=dict)
    next_id: int = 0
    clock: Clock = field(default_factory=Clock)

    def group(self, name: str, ranks: list[int], desc: str | None = None) -> Recorder:
        """Construct a process group this rank is a member of (``new_group``)."""
        if desc is None:
            desc = "default_pg" if name == "0" else "undefined"
        self.groups[name] = _Group(name, desc, tuple(sorted(ranks)), len(self.groups))
        return self

    def local(self, pg: str) -> int:
        return self.groups[pg].ranks.index(self.rank)

    def collective(self, pg: str, op: str = "all_reduce", sizes: Any = ((16,),), out: Any = None,
                   dtype: str = "Float", state: str = "completed") -> dict:
        g = self.groups[pg]
        g.seq_coll += 1
        g.op_id += 1
        return self._record(g, op, sizes, sizes if out is None else out, dtype, state,
                            p2p=False)

    def send(self, pg: str, dst: int, sizes: Any = ((16,),), state: str = "completed") -> dict:
        """``dist.send`` to global rank ``dst``."""
        return self._p2p(pg, f"send {self.local(pg)}->{self._local_of(pg, dst)}", sizes, state)

    def recv(self, pg: str, src: int, sizes: Any = ((16,),), state: str = "completed") -> dict:
        """``dist.recv`` from global rank ``src``."""
        return self._p2p(pg, f"recv {self.local(pg)}<-{self._local_of(pg, src)}", sizes, state)

    def batch(self, pg: str, ops: list[tuple[str, int]], state: str = "completed",
              sizes: Any = ((16,),)) -> None:
        """``batch_isend_irecv``: ``ops`` are ("send"|"recv", global peer)."""
        g = self.groups[pg]
        g.seq_p2p += 1
        me = self.local(pg)
        for kind, peer in ops:
            g.op_id += 1
            other = self._local_of(pg, peer)
            name = f"send {me}->{other}" if kind == "send" else f"recv {me}<-{other}"
            self._record(g, name, sizes, sizes, "Float", "scheduled", p2p=True)
        self._record(g, "coalesced", (), (), None, state, p2p=True)

    def coalesced(self, pg: str, ops: list[tuple[str, Any]], state: str = "completed",
                  end: str = "coalesced") -> None:
        """A coalesced group of collectives (``_coalescing_manager``): one seq for all."""
        g = self.groups[pg]
        g.seq_coll += 1
        for op, sizes in ops:
            g.op_id += 1
            self._record(g, op, sizes, sizes, "Float", "scheduled", p2p=False)
        self._record(g, end, (), (), None, state, p2p=False)

    def _local_of(self, pg: str, rank: int) -> int:
        return self.groups[pg].ranks.index(rank)

    def _p2p(self, pg: str, name: str, sizes: Any, state: str) -> dict:
        g = self.groups[pg]
        g.seq_p2p += 1
        g.op_id += 1
        return self._record(g, name, sizes, sizes, "Float", state, p2p=True)

    def _record(self, g: _Group, name: str, sizes: Any, out: Any, dtype: str | None,
                state: str, p2p: bool) -> dict:
        if state == "started" and not self.timing:
            raise ValueError("without timing no entry is ever marked started")
        created = self.clock.tick()
        started = created + STEP // 4 if state in ("started", "completed") else None
        done = created + STEP // 2 if state == "completed" else None
        if not p2p:
            if started is not None:
                g.last_started = g.seq_coll
            if done is not None:
                g.last_completed = g.seq_coll
        e = {
            "record_id": self.next_id, "pg_id": g.pg_id, "process_group": (g.name, g.desc),
            "thread_name": "pt_main_thread", "thread_id": "139872101", "collective_seq_id":
            g.seq_coll, "p2p_seq_id": g.seq_p2p, "op_id": g.op_id,
            "profiling_name": f"{self.backend}:{name}", "time_created_ns": created,
            "input_sizes": [list(s) for s in sizes],
            "input_dtypes": [dtype] * len(sizes) if dtype else [],
            "output_sizes": [list(s) for s in out],
            "output_dtypes": [dtype] * len(out) if dtype else [],
            "state": state, "time_discovered_started_ns": started,
            "time_discovered_completed_ns": done,
            # gloo marks every entry retired, even the one that timed out
            "retired": done is not None or self.backend == "gloo",
            "timeout_ms": self.timeout_ms, "is_p2p": p2p,
        }
        if self.timing and done is not None and name not in ("coalesced",):
            e["duration_ms"] = 0.25
        self.next_id += 1
        self.entries.append(e)
        del self.entries[:-self.max_entries]  # the ring buffer keeps the newest
        return e

    # -- the dump ------------------------------------------------------------------------------

    def pg_config(self) -> dict:
        return {g.name: {"name": g.name, "desc": g.desc,
                         "ranks": "[" + ", ".join(str(r) for r in g.ranks) + "]"}
                for g in self.groups.values()}

    def dump_dict(self, version: str = "2.10", pg_config: dict | None = None) -> dict:
        """The dict ``_dump_nccl_trace()`` pickles (``pg_config`` None: the real one)."""
        minor = _minor(version)
        out: dict[str, Any] = {"version": version,
                               "pg_config": self.pg_config() if pg_config is None else pg_config}
        if minor == 7:
            out["nccl_version"] = "2.21.5"
        elif minor >= 8:
            out["comm_lib_version"] = "2.21.5" if self.backend == "nccl" else ""
        if minor >= 3:
            out["pg_status"] = {str(g.pg_id): {"last_enqueued_collective": g.seq_coll,
                                               "last_started_collective": g.last_started,
                                               "last_completed_collective": g.last_completed}
                                for g in self.groups.values()}
        entries = []
        for e in self.entries:
            e = dict(e)
            if minor < 3:
                del e["is_p2p"], e["timeout_ms"]
            if minor < 6:
                del e["thread_name"], e["thread_id"]
            entries.append(e)
        out["entries"] = entries
        return out

    def dump(self, version: str = "2.10", encoding: str = "pickle",
             pg_config: dict | None = None) -> bytes:
        d = self.dump_dict(version, pg_config)
        if encoding == "pickle":
            return pickle.dumps(d, protocol=2)
        return json_dump(d)


def json_dump(d: dict) -> bytes:
    """What ``_dump_nccl_trace_json()`` writes for the same state: times never observed are 0,
    pg_status values are strings, tuples are lists, no stacks, no ``entries`` when empty."""
    out = {k: v for k, v in d.items() if k != "entries"}
    if "pg_status" in out:
        out["pg_status"] = {k: {kk: str(vv) for kk, vv in v.items()}
                            for k, v in out["pg_status"].items()}
    entries = []
    for e in d.get("entries", []):
        e = {k: v for k, v in e.items() if k != "frames"}
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[k] = e[k] or 0
        if isinstance(e["process_group"], tuple):
            e["process_group"] = list(e["process_group"])
        entries.append(e)
    if entries:
        out["entries"] = entries
    out["nccl_comm_state"] = {}
    return json.dumps(out, sort_keys=True).encode()


GLOO_PG_CONFIG = {"": {"name": "", "desc": "", "ranks": "[]"}}


def world(n: int, backend: str = "nccl", **kw: Any) -> list[Recorder]:
    """``n`` ranks sharing one clock that all constructed the default group '0'."""
    clock = Clock()
    return [Recorder(r, backend=backend, clock=clock, **kw).group("0", list(range(n)))
            for r in range(n)]


def write(recs: list[Recorder], path: Any, version: str = "2.10", encoding: str = "pickle",
          skip: tuple[int, ...] = (), pg_config: dict | None = None) -> Any:
    """Each rank's dump as torch names it (``nccl_trace_rank_<rank>``, ``.json`` for JSON)."""
    path.mkdir(parents=True, exist_ok=True)
    for rec in recs:
        if rec.rank in skip:
            continue
        name = f"nccl_trace_rank_{rec.rank}" + (".json" if encoding == "json" else "")
        (path / name).write_bytes(rec.dump(version, encoding, pg_config))
    return path
