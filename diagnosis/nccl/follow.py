"""Follow an Inspector dump directory while the job runs: every process's file, as it grows.

The Inspector of each process opens ``<dir>/<hostname>-pid<pid>.log`` with ``"w"`` at its first
dump and appends to it; a restarted process gets a new pid, so a new file; a log rotator may
rename a file (``x.log`` -> ``x.log.1``) or copy and truncate it. :class:`InspectorFollower`
keeps each file it reads open, by inode, so that:

* new lines are read from where the last poll stopped, a partial last line kept for the next;
* a file renamed or deleted under the reader is read to its end through the open descriptor,
  and a new file at the old name is a new file (its own inode), read from its start;
* a file that shrank was truncated (copy-and-truncate rotation, or rewritten): a warning names
  it, and reading starts again at its start; nothing before the truncation is read twice;
* several processes per node are several files, each its own stream.

Compressed files (``.gz``) are rotated archives of lines already read: the follower leaves them
alone (``c4 analyze`` reads them). ``poll`` costs one ``scandir`` and one ``fstat`` per file
when nothing changed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from diagnosis.nccl.inspector import LineReader
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.records import NcclOps

log = logging.getLogger(__name__)

__all__ = ["InspectorFollower"]

_LIVE_SUFFIXES = (".log", ".jsonl")


@dataclass
class _Tracked:
    path: str
    fh: BinaryIO
    reader: LineReader
    offset: int = 0
    gone_polls: int = 0            # polls since the file left the directory


@dataclass
class InspectorFollower:
    """Reads what is new in an Inspector dump directory at each :meth:`poll`.

    ``max_bytes``: at most this much is read per file and poll (the rest next time), so that a
    large backlog does not stall the caller. ``recursive``: also follow files one directory
    down (a job that gives each node or rank its own subdirectory)."""

    root: Path
    problems: Problems = field(default_factory=Problems)
    max_bytes: int = 8 << 20
    recursive: bool = True
    _files: dict[tuple[int, int], _Tracked] = field(default_factory=dict)
    bytes_read: int = 0
    rows_read: int = 0

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def poll(self) -> list[NcclOps]:
        """The rows written since the last poll, one batch per file that grew."""
        present = self._scan()
        out: list[NcclOps] = []
        for key, path in present.items():
            t = self._files.get(key)
            if t is None:
                t = self._open(key, path)
                if t is None:
                    continue
            t.gone_polls = 0
            t.path = path
        for key, t in list(self._files.items()):
            if key not in present:
                t.gone_polls += 1
            batch = self._read(t)
            if batch is not None and len(batch):
                out.append(batch)
            if t.gone_polls > 1:       # renamed or deleted, and read to its end since
                t.reader.finish()
                t.fh.close()
                del self._files[key]
        self.rows_read += sum(len(b) for b in out)
        return out

    def close(self) -> None:
        for t in self._files.values():
            t.fh.close()
        self._files.clear()

    # ----- internals ------------------------------------------------------------------------
    def _scan(self) -> dict[tuple[int, int], str]:
        found: dict[tuple[int, int], str] = {}
        dirs = [str(self.root)]
        while dirs:
            d = dirs.pop()
            try:
                entries = list(os.scandir(d))
            except FileNotFoundError:
                continue
            for e in entries:
                if e.name.startswith("."):
                    continue
                if e.is_dir(follow_symlinks=False):
                    if self.recursive and d == str(self.root):
                        dirs.append(e.path)
                    continue
                if not e.name.endswith(_LIVE_SUFFIXES):
                    continue
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue
                found[(st.st_dev, st.st_ino)] = e.path
        return found

    def _open(self, key: tuple[int, int], path: str) -> _Tracked | None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - kept open across polls, closed in poll/close
        except FileNotFoundError:
            return None
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != key:      # replaced between scandir and open
            fh.close()
            return None
        t = _Tracked(path, fh, LineReader(path, self.problems))
        self._files[key] = t
        return t

    def _read(self, t: _Tracked) -> NcclOps | None:
        size = os.fstat(t.fh.fileno()).st_size
        if size < t.offset:
            self.problems.add(t.path, t.reader.line, "truncated_file",
                              f"the file shrank from {t.offset} to {size} bytes (truncated by "
                              "a log rotator, or rewritten): reading it again from its start")
            t.offset = 0
            t.reader = LineReader(t.path, self.problems)
        if size == t.offset:
            return None
        t.fh.seek(t.offset)
        data = t.fh.read(min(size - t.offset, self.max_bytes))
        t.offset += len(data)
        self.bytes_read += len(data)
        return t.reader.feed(data)
