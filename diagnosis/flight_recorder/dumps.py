"""Read PyTorch Flight Recorder dumps (format 2.x, pickle or JSON) into plain records.

One file per rank, named ``<prefix><rank>`` with an optional extension (``nccl_trace_rank_3``,
``fr_7.pkl``, ``dump-rank12.json``). Dumps may come from other machines, so pickles are read
with an unpickler that refuses every class but a few builtins: a dump is plain data, and a
pickle that asks for anything else is either not a dump or hostile.

Nothing here trusts ``pg_config``: gloo on torch 2.13 writes it empty or keyed by ``''`` with
ranks ``'[]'``. Group identity comes from each entry's ``process_group`` name, which every
member rank records the same way (``pg_id`` is a per-rank counter and differs across ranks).
"""

from __future__ import annotations

import ast
import io
import json
import logging
import pickle
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnosis.errors import DiagnosisError, FormatError

log = logging.getLogger(__name__)

# Extensions a dump file may carry; anything else after the rank digits is not a dump.
_EXTENSIONS = ("", ".pkl", ".pickle", ".json", ".bin", ".dump", ".trace")
_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?P<ext>\.[A-Za-z]+)?$")
_SUPPORTED_MAJOR = 2


@dataclass(frozen=True)
class FrEntry:
    """One recorded collective or point-to-point call of one rank."""

    rank: int
    index: int  # position in the rank's ring buffer order (record_id when present)
    pg: str  # process group name: the same on every member rank
    pg_desc: str
    seq: int  # collective_seq_id within the group
    op: str  # "all_reduce", "send", ...
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

    @property
    def label(self) -> str:
        return f"{self.op} #{self.seq} on process group {self.pg!r}"


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


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickles builtin containers and scalars only; any class lookup is refused."""

    _ALLOWED = frozenset({("builtins", n) for n in ("set", "frozenset", "complex", "bytearray")})

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a dump holds plain data")


def safe_unpickle(data: bytes) -> Any:
    """``pickle.loads`` restricted to plain data (no classes, no code)."""
    return _PlainDataUnpickler(io.BytesIO(data)).load()


def rank_of_file(name: str) -> tuple[str, int, str] | None:
    """``(prefix, rank, extension)`` of a dump file name, or None if it does not look like one."""
    m = _NAME.match(name)
    if not m or (m.group("ext") or "").lower() not in _EXTENSIONS:
        return None
    return m.group("prefix"), int(m.group("rank")), (m.group("ext") or "").lower()


def find_dump_files(path: Path, prefix: str | None = None) -> dict[int, Path]:
    """Rank -> file of the dumps in directory ``path``.

    Without ``prefix`` the files are grouped by (prefix, extension); one group must remain. When
    the same dumps were written twice, as pickle and as JSON, the pickle wins (it keeps stacks).
    """
    if not path.is_dir():
        raise DiagnosisError(f"{path} is not a directory: give the directory holding one Flight "
                             "Recorder dump per rank")
    groups: dict[tuple[str, str], dict[int, Path]] = defaultdict(dict)
    for f in sorted(path.iterdir()):
        if not f.is_file() or f.name.startswith("."):
            continue
        parsed = rank_of_file(f.name)
        if parsed is None:
            log.debug("skipping %s: not named <prefix><rank>", f.name)
            continue
        pre, rank, ext = parsed
        if prefix is not None and pre != prefix:
            continue
        groups[(pre, ext)][rank] = f
    if not groups:
        wanted = f"named {prefix}<rank>" if prefix is not None else "named <prefix><rank>"
        raise DiagnosisError(f"no Flight Recorder dumps ({wanted}) in {path}: point at the "
                             "directory the ranks dumped into (TORCH_FR_DUMP_TEMP_FILE)")
    if len(groups) == 1:
        return next(iter(groups.values()))
    prefixes = {pre for pre, _ in groups}
    if len(prefixes) == 1:
        # One prefix, several extensions: the same dumps written in two encodings.
        by_ext = {ext: files for (_, ext), files in groups.items()}
        for ext in (".pkl", ".pickle", "", ".bin", ".dump", ".trace", ".json"):
            if ext in by_ext:
                log.info("dumps in several encodings; reading the %r files", ext or "pickle")
                return by_ext[ext]
    names = sorted(f"{pre}<rank>{ext}" for pre, ext in groups)
    raise DiagnosisError(f"{path} holds several sets of dumps ({', '.join(names)}): "
                         "pass the prefix of the set to analyse")


def load_dumps(path: Path, prefix: str | None = None) -> list[RankDump]:
    """Every rank's dump in directory ``path``, ordered by rank."""
    return [load_dump(f, rank) for rank, f in sorted(find_dump_files(path, prefix).items())]


def load_dump(file: Path, rank: int) -> RankDump:
    """One rank's dump; :class:`FormatError` names the file and field when it is malformed."""
    data = file.read_bytes()
    src = file.name
    if not data.strip():
        raise FormatError("empty dump: the rank may have died while writing it", source=src)
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            line = getattr(exc, "lineno", None)
            raise FormatError(f"not valid JSON ({exc}); the file may be truncated",
                              source=src, line=line) from exc
    else:
        try:
            obj = safe_unpickle(data)
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError,
                KeyError, AttributeError, UnicodeDecodeError, OverflowError,
                MemoryError) as exc:   # a corrupt length field may ask for terabytes
            raise FormatError(f"not a readable pickle ({exc}); the file may be truncated",
                              source=src) from exc
    return parse_dump(obj, rank, src)


def parse_dump(obj: Any, rank: int, source: str) -> RankDump:
    """Validate and normalise one decoded dump (pickle and JSON differ in small ways)."""
    if not isinstance(obj, dict):
        raise FormatError(f"a dump is a dict, found {type(obj).__name__}", source=source)
    version = str(_need(obj, "version", source))
    major = version.split(".", 1)[0]
    if not major.isdigit() or int(major) != _SUPPORTED_MAJOR:
        log.warning("%s: Flight Recorder format %s, expected 2.x; reading it anyway",
                    source, version)
    if "rank" in obj and isinstance(obj["rank"], int) and obj["rank"] != rank:
        log.warning("%s: file name says rank %d, the dump says %d; using the dump's",
                    source, rank, obj["rank"])
        rank = obj["rank"]
    raw_entries = obj.get("entries", [])
    if not isinstance(raw_entries, list):
        raise FormatError("entries must be a list", source=source, field="entries")
    entries = tuple(_entry(e, i, rank, source) for i, e in enumerate(raw_entries))
    return RankDump(rank=rank, source=source, version=version, entries=entries,
                    pg_config=_pg_config(obj.get("pg_config"), source),
                    comm_lib_version=str(obj.get("comm_lib_version") or ""))


def _need(obj: dict, key: str, source: str, where: str = "") -> Any:
    if key not in obj:
        raise FormatError(f"missing{where}", source=source, field=key)
    return obj[key]


def _entry(e: Any, i: int, rank: int, source: str) -> FrEntry:
    where = f" in entries[{i}]"
    if not isinstance(e, dict):
        raise FormatError(f"entries[{i}] is {type(e).__name__}, not a dict", source=source,
                          field="entries")
    name = str(_need(e, "profiling_name", source, where))
    backend, _, call = name.rpartition(":")
    op, _, peer = call.strip().partition(" ")
    if "collective_seq_id" in e:
        seq = e["collective_seq_id"]
    elif "seq_id" in e:  # formats before 2.2
        seq = e["seq_id"]
    else:
        raise FormatError(f"missing{where}", source=source, field="collective_seq_id")
    pg, desc = _process_group(e, source, where)
    try:
        return FrEntry(
            rank=rank, index=int(e.get("record_id", i)), pg=pg, pg_desc=desc, seq=int(seq),
            op=op, backend=backend, state=str(_need(e, "state", source, where)),
            is_p2p=bool(e.get("is_p2p", op in ("send", "recv"))),
            p2p_seq=int(e.get("p2p_seq_id") or 0), peer=peer,
            input_sizes=_sizes(e.get("input_sizes") or ()),
            output_sizes=_sizes(e.get("output_sizes") or ()),
            input_dtypes=tuple(str(d) for d in e.get("input_dtypes") or ()),
            output_dtypes=tuple(str(d) for d in e.get("output_dtypes") or ()),
            time_created_ns=_time(e.get("time_created_ns")),
            time_started_ns=_time(e.get("time_discovered_started_ns")),
            time_completed_ns=_time(e.get("time_discovered_completed_ns")),
            timeout_ms=int(e["timeout_ms"]) if e.get("timeout_ms") is not None else None,
        )
    except (TypeError, ValueError, OverflowError) as exc:   # OverflowError: int(inf)
        raise FormatError(f"bad value{where}: {exc}", source=source) from exc


def _process_group(e: dict, source: str, where: str) -> tuple[str, str]:
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
    if isinstance(pg, str) and pg:
        return pg, ""
    if "pg_id" in e:
        # pg_id is a per-rank counter: equal across ranks only for groups created in the same
        # order everywhere. Better than nothing for dumps that lack process_group.
        return str(e["pg_id"]), ""
    raise FormatError(f"missing{where}", source=source, field="process_group")


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
            except (ValueError, SyntaxError):
                log.debug("%s: pg_config[%r] ranks %r unreadable; ignored", source, key, ranks)
                continue
        if not name or not isinstance(ranks, (list, tuple, set)) or not ranks:
            continue
        try:
            out[name] = tuple(sorted(int(r) for r in ranks))
        except (TypeError, ValueError):
            log.debug("%s: pg_config[%r] ranks %r are not integers; ignored", source, key, ranks)
    return out


def _sizes(x: Any) -> tuple:
    if not isinstance(x, (list, tuple)):
        raise TypeError(f"tensor sizes are a list, not {type(x).__name__}")
    return _tuples(x)


def _tuples(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return tuple(_tuples(v) for v in x)
    if isinstance(x, (dict, set, bytearray)):   # sizes are nested lists of numbers
        raise TypeError(f"tensor sizes hold a {type(x).__name__}")
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x


def _time(x: Any) -> int | None:
    # Pickles say None for "never observed"; the JSON writer says 0.
    return int(x) if x else None
