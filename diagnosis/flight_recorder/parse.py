"""Validate and normalise one decoded Flight Recorder dump (format 2.x, pickle or JSON).

The format, as torch's writer produces it (``FlightRecorderDetail.hpp``) and torch's own analyzer
reads it (``torch/distributed/flight_recorder``): a dict with ``version``, ``pg_config`` (group
name -> ``{name, desc, ranks}``, ranks as the string ``"[0, 1]"``), ``pg_status`` (per ``pg_id``;
JSON writes its numbers as strings), ``comm_lib_version`` (``nccl_version`` in 2.7),
``nccl_comm_state``, and ``entries`` (left out of JSON when empty), oldest first. Each entry:
``record_id``, ``pg_id``, ``process_group`` (name, desc), ``collective_seq_id``, ``p2p_seq_id``,
``op_id``, ``profiling_name`` (``nccl:all_reduce``, ``nccl:send 0->1``, ``nccl:recv 1<-0``,
``nccl:coalesced``), sizes and dtypes, ``state`` (scheduled/started/completed),
``time_created_ns``, ``time_discovered_started_ns``/``_completed_ns`` (None in pickles, 0 in
JSON when never observed), ``duration_ms`` (timing on), ``retired``, ``timeout_ms`` and
``is_p2p`` (2.3 on), ``frames`` (pickles with stacks). Before 2.2 there was one ``seq_id``.

Only what the analysis needs is required; every field read is checked, and a bad one is a
:class:`FormatError` naming the file and the field.
"""

from __future__ import annotations

import ast
import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any

from c4.errors import FormatError

log = logging.getLogger(__name__)

SUPPORTED_MAJOR = 2
STATES_IN_ORDER = ("scheduled", "started", "completed")


@dataclass(frozen=True)
class FrEntry:
    """One recorded collective or point-to-point call of one rank."""

    rank: int
    index: int  # record_id: the rank's own recording order, over every group
    pg: str  # process group name as recorded (the same on every member, see groups.py)
    pg_desc: str
    seq: int  # collective_seq_id within the group
    op: str  # "all_reduce", "send", "coalesced", ...
    backend: str  # "gloo", "nccl", ... (prefix of profiling_name)
    state: str  # "scheduled", "started", "completed" (gloo: always "scheduled")
    is_p2p: bool = False
    p2p_seq: int = 0
    peer: str = ""  # "0->1" for send, "1<-0" for recv (group-local ranks)
    input_sizes: tuple = ()
    output_sizes: tuple = ()
    input_dtypes: tuple[str, ...] = ()
    output_dtypes: tuple[str, ...] = ()
    time_created_ns: int | None = None
    time_started_ns: int | None = None
    time_completed_ns: int | None = None
    timeout_ms: int | None = None
    retired: bool | None = None
    duration_ms: float | None = None

    @property
    def label(self) -> str:
        if self.is_p2p:
            return f"{self.op} {self.peer} (p2p #{self.p2p_seq}) on process group {self.pg!r}"
        return f"{self.op} #{self.seq} on process group {self.pg!r}"

    @property
    def closes_group(self) -> bool:
        """The entry that ends a coalesced group (``coalesced``, ``ALLGATHER_coalesced``...).

        Its members are recorded without events and stay ``scheduled``; this entry carries the
        group's state. ``allreduce_coalesced`` and friends are single calls, not such entries.
        """
        return is_group_end(self.op)


def is_group_end(op: str) -> bool:
    if op in ("coalesced", "_coalesced"):
        return True
    head, _, tail = op.rpartition("_")
    return tail == "coalesced" and head.isupper()


@dataclass(frozen=True)
class RankDump:
    """The whole dump of one rank."""

    rank: int
    source: str  # the file's name, for messages
    version: str
    entries: tuple[FrEntry, ...]
    # Group name -> ranks, only for entries of pg_config that name a group and list its ranks.
    pg_config: dict[str, tuple[int, ...]] = field(default_factory=dict)
    comm_lib_version: str = ""
    pg_status: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def whole_history(self) -> bool:
        """Whether the buffer still holds the rank's first call (record_id 0).

        When it does not, the ring buffer wrapped (or only active calls were dumped): older calls
        are gone from it, and their absence says nothing.
        """
        return not self.entries or self.entries[0].index == 0

    @property
    def oldest_ns(self) -> int | None:
        times = [e.time_created_ns for e in self.entries if e.time_created_ns is not None]
        return min(times) if times else None


def parse_dump(obj: Any, rank: int, source: str) -> RankDump:
    """Validate and normalise one decoded dump (pickle and JSON differ in small ways)."""
    if not isinstance(obj, dict):
        raise FormatError(f"a dump is a dict, found {type(obj).__name__}: is this a Flight "
                          "Recorder dump?", source=source)
    if "version" not in obj:
        raise FormatError("missing: is this a Flight Recorder dump?", source=source,
                          field="version")
    if isinstance(obj["version"], bool) or not isinstance(obj["version"], (str, int, float)):
        raise FormatError(f"bad value {obj['version']!r}: a format version is text like '2.10'",
                          source=source, field="version")
    version = str(obj["version"])
    major, _, minor = version.partition(".")
    if not (major.isdigit() and minor.isdigit()) or int(major) != SUPPORTED_MAJOR:
        log.warning("%s: Flight Recorder format %s, expected 2.x; reading it anyway",
                    source, version)
    if isinstance(obj.get("rank"), int) and obj["rank"] != rank:
        log.warning("%s: file name says rank %d, the dump says %d; using the dump's",
                    source, rank, obj["rank"])
        rank = obj["rank"]
    raw = obj.get("entries", [])  # JSON leaves the key out when there are no entries
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise FormatError(f"must be a list, found {type(raw).__name__}", source=source,
                          field="entries")
    parsed = [_entry(e, i, rank, source) for i, e in enumerate(raw)]
    parsed.sort(key=lambda pe: pe[0].index)
    entries = _resolve_p2p(parsed)
    lib = obj.get("comm_lib_version", obj.get("nccl_version"))
    return RankDump(rank=rank, source=source, version=version, entries=entries,
                    pg_config=_pg_config(obj.get("pg_config"), source),
                    comm_lib_version=str(lib) if isinstance(lib, (str, int, float)) else "",
                    pg_status=_pg_status(obj.get("pg_status")))


class _Fields:
    """Typed reads of one entry's fields; errors name the file, the field and the entry."""

    def __init__(self, e: dict, i: int, source: str) -> None:
        self.e, self.where, self.source = e, f" in entries[{i}]", source

    def fail(self, key: str, why: str) -> FormatError:
        return FormatError(f"{why}{self.where}", source=self.source, field=key)

    def need(self, key: str) -> Any:
        if key not in self.e:
            raise self.fail(key, "missing")
        return self.e[key]

    def text(self, key: str) -> str:
        v = self.need(key)
        if not isinstance(v, str):
            raise self.fail(key, f"bad value: expected text, found {type(v).__name__}")
        return v

    def whole(self, key: str, default: int | None = None) -> int:
        """A required whole number, or ``default`` when the field is absent or null."""
        if self.e.get(key) is None:
            if default is not None:
                return default
            raise self.fail(key, "missing" if key not in self.e else "bad value: null")
        return self._int(key, self.e[key])

    def _int(self, key: str, v: Any) -> int:
        if type(v) is int:  # the common case, first: dumps hold millions of these
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise self.fail(key, f"bad value: expected a whole number, found {type(v).__name__}")
        try:
            n = int(v)
        except (ValueError, OverflowError) as exc:  # "abc", inf
            raise self.fail(key, f"bad value {v!r}: not a whole number") from exc
        if isinstance(v, float) and not math.isfinite(v):
            raise self.fail(key, f"bad value {v!r}: not a whole number")
        return n

    def opt_int(self, key: str) -> int | None:
        v = self.e.get(key)
        return None if v is None else self._int(key, v)

    def time(self, key: str) -> int | None:
        # Pickles say None for "never observed"; the JSON writer says 0.
        v = self.opt_int(key)
        return v or None

    def sizes(self, key: str) -> tuple:
        v = self.e.get(key)
        if v is None:
            return ()
        if not isinstance(v, (list, tuple)):
            raise self.fail(key, f"bad value: tensor sizes are a list, not {type(v).__name__}")
        try:  # the common shape first: a list of lists of ints
            out = tuple(tuple(dims) for dims in v)
            if all(type(n) is int for dims in out for n in dims):
                return out
        except TypeError:
            pass
        try:
            return _tuples(v)
        except (TypeError, ValueError, OverflowError) as exc:
            raise self.fail(key, f"bad value: {exc}") from exc

    def dtypes(self, key: str) -> tuple[str, ...]:
        v = self.e.get(key)
        if v is None:
            return ()
        if isinstance(v, str):  # one dtype for all tensors
            return (v,)
        if not isinstance(v, (list, tuple)) or not all(type(d) is str for d in v):
            raise self.fail(key, "bad value: dtypes are a list of names")
        return tuple(v)


def _entry(e: Any, i: int, rank: int, source: str) -> tuple[FrEntry, bool | None]:
    """One entry, and its ``is_p2p`` (None when the dump predates the field)."""
    if not isinstance(e, dict):
        raise FormatError(f"entries[{i}] is {type(e).__name__}, not a dict", source=source,
                          field="entries")
    f = _Fields(e, i, source)
    name = f.text("profiling_name")
    backend, _, call = name.rpartition(":")
    op, _, peer = call.strip().partition(" ")
    if not op:
        raise f.fail("profiling_name", f"bad value {name!r}: no operation named")
    if "collective_seq_id" in e:
        seq = f.whole("collective_seq_id")
    elif "seq_id" in e:  # formats before 2.2 had one counter
        seq = f.whole("seq_id")
    else:
        raise f.fail("collective_seq_id", "missing")
    pg, desc = _process_group(f)
    state = f.text("state")
    is_p2p = e.get("is_p2p")
    if is_p2p is not None and not isinstance(is_p2p, bool):
        raise f.fail("is_p2p", f"bad value: expected true or false, found {is_p2p!r}")
    retired = e.get("retired")
    duration = e.get("duration_ms")
    if duration is not None and (isinstance(duration, bool)
                                 or not isinstance(duration, (int, float))):
        raise f.fail("duration_ms", "bad value: not a number")
    entry = FrEntry(
        rank=rank, index=f.whole("record_id", default=i), pg=pg, pg_desc=desc, seq=seq, op=op,
        backend=backend, state=state, is_p2p=bool(is_p2p) if is_p2p is not None else
        op in ("send", "recv"), p2p_seq=f.whole("p2p_seq_id", default=0), peer=peer,
        input_sizes=f.sizes("input_sizes"), output_sizes=f.sizes("output_sizes"),
        input_dtypes=f.dtypes("input_dtypes"), output_dtypes=f.dtypes("output_dtypes"),
        time_created_ns=f.time("time_created_ns"),
        time_started_ns=f.time("time_discovered_started_ns"),
        time_completed_ns=f.time("time_discovered_completed_ns"),
        timeout_ms=f.opt_int("timeout_ms"),
        retired=retired if isinstance(retired, bool) else None,
        duration_ms=float(duration) if duration is not None else None,
    )
    return entry, is_p2p


def _resolve_p2p(parsed: list[tuple[FrEntry, bool | None]]) -> tuple[FrEntry, ...]:
    """Entries in record order, with ``is_p2p`` settled for dumps that do not carry it.

    Before 2.3 nothing says whether the entry closing a coalesced group closes a batch of
    sends and receives; it does when the call before it on the same group is one of them, with
    the same p2p_seq_id. Counted as a collective, it would collide with the group's last real
    collective, whose collective_seq_id it carries.
    """
    out: list[FrEntry] = []
    last_on_pg: dict[str, FrEntry] = {}
    for entry, given in parsed:
        if given is None and entry.closes_group:
            prev = last_on_pg.get(entry.pg)
            if prev is not None and prev.op in ("send", "recv") and prev.p2p_seq == entry.p2p_seq:
                entry = _with_p2p(entry)
        out.append(entry)
        last_on_pg[entry.pg] = entry
    return tuple(out)


def _with_p2p(e: FrEntry) -> FrEntry:
    return replace(e, is_p2p=True)


def _process_group(f: _Fields) -> tuple[str, str]:
    pg = f.e.get("process_group")
    if isinstance(pg, (list, tuple)) and pg and all(isinstance(x, (str, int)) for x in pg):
        return str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
    if isinstance(pg, str) and pg:
        return pg, ""
    if pg is not None:
        raise f.fail("process_group", "bad value: expected (name, description)")
    if "pg_id" in f.e:
        # pg_id is a per-rank counter: equal across ranks only for groups created in the same
        # order everywhere. Better than nothing for dumps that lack process_group.
        return str(f.whole("pg_id")), ""
    raise f.fail("process_group", "missing")


def _pg_config(cfg: Any, source: str) -> dict[str, tuple[int, ...]]:
    """Named groups with a parseable, non-empty rank list; the rest is ignored (gloo garbage)."""
    out: dict[str, tuple[int, ...]] = {}
    if not isinstance(cfg, dict):
        return out
    for key, val in cfg.items():
        if not isinstance(val, dict):
            continue
        name = str(key) or str(val.get("name") or "")
        ranks = val.get("ranks")
        if isinstance(ranks, str):
            try:
                ranks = ast.literal_eval(ranks) if ranks.strip() else []
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                log.debug("%s: pg_config[%r] ranks %r unreadable; ignored", source, key, ranks)
                continue
        if not name or not isinstance(ranks, (list, tuple, set)) or not ranks:
            continue
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
            log.debug("%s: pg_config[%r] ranks %r are not ranks; ignored", source, key, ranks)
            continue
        out[name] = tuple(sorted(ranks))
    return out


def _pg_status(status: Any) -> dict[str, dict[str, int]]:
    """pg_id -> last enqueued/started/completed sequence numbers (numbers or, in JSON, text)."""
    out: dict[str, dict[str, int]] = {}
    if not isinstance(status, dict):
        return out
    for pg_id, val in status.items():
        if not isinstance(val, dict):
            continue
        nums = {}
        for k, v in val.items():
            try:
                nums[str(k)] = int(v)
            except (TypeError, ValueError, OverflowError):
                continue
        out[str(pg_id)] = nums
    return out


def _tuples(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return tuple(_tuples(v) for v in x)
    if isinstance(x, bool) or not isinstance(x, (int, float)):  # sizes are nested numbers
        raise TypeError(f"tensor sizes hold a {type(x).__name__}")
    return int(x)
