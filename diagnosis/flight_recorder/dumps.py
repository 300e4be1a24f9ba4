"""Read PyTorch Flight Recorder dumps (format 2.x, pickle or JSON) into plain records.

One file per rank, named ``<prefix><rank>`` with an optional extension (``nccl_trace_rank_3``,
``fr_7.pkl``, ``dump-rank12.json``). Dumps may come from other machines, so pickles are read
with an unpickler that refuses every class but a few builtins: a dump is plain data, and a
pickle that asks for anything else is either not a dump or hostile.

What a dump holds and how it is checked: parse.py.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from c4.errors import FormatError
from diagnosis.errors import DiagnosisError
from diagnosis.flight_recorder.parse import FrEntry, RankDump, parse_dump

__all__ = ["FrEntry", "RankDump", "find_dump_files", "load_dump", "load_dumps", "parse_dump",
           "rank_of_file", "safe_unpickle"]

log = logging.getLogger(__name__)

# Extensions a dump file may carry; anything else after the rank digits is not a dump.
_EXTENSIONS = ("", ".pkl", ".pickle", ".json", ".bin", ".dump", ".trace")
_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?P<ext>\.[A-Za-z]+)?$")


def _same(value: Any, *_: Any) -> Any:
    return value


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickles builtin containers and scalars only; any other class lookup is refused.

    torch's own pickler may wrap lists of numbers or strings in ``torch.jit._pickle`` helpers
    that only return their argument; those are answered with a local stand-in, never imported.
    """

    _ALLOWED = frozenset({("builtins", n) for n in ("set", "frozenset", "complex", "bytearray")})
    _TORCH_IDENTITY = frozenset({"build_intlist", "build_doublelist", "build_boollist",
                                 "build_stringlist", "build_strlist", "restore_type_tag"})

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        if module == "torch.jit._pickle" and name in self._TORCH_IDENTITY:
            return _same
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
                         "pass the prefix of the set to analyse (c4 analyze --prefix)")


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
                KeyError, AttributeError, UnicodeDecodeError, OverflowError, RecursionError,
                MemoryError) as exc:   # a corrupt length field may ask for terabytes
            raise FormatError(f"not a readable pickle ({exc}); the file may be truncated",
                              source=src) from exc
    return parse_dump(obj, rank, src)
