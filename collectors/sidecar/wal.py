"""Segment files of checksummed records: the storage under the sidecar's write-ahead log.

A record is ``MAGIC | body length (u32) | crc32 of kind and body (u32) | kind (u8) | body``,
little-endian. A reader that meets a bad record (wrong magic, impossible length, checksum
mismatch) looks for the next ``MAGIC`` whose record checks out, so a corrupt record loses
itself only, never the records around it. Only the process that creates a segment appends to
it; a restarted sidecar starts a new one, so a record torn by a crash stays at the end of an
old segment, where it is skipped.

Appends never leave a partial record behind: a write that fails (disk full) is cut back to
where it started and raised as ``LogFull``. There are no temporary files. Nothing here fsyncs
on its own: ``sync()`` makes every segment written since the last one durable (the spill
decides when that is worth it), and a segment deleted before that never costs a disk write.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import struct
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from collectors.sidecar.errors import LogCorrupt, LogError, LogFull

log = logging.getLogger(__name__)

MAGIC = b"\xc4WL1"
HEADER = struct.Struct("<4sIIB")
# A record this large is a corrupt length field: frames are capped far below it.
MAX_RECORD = 256 << 20
SUFFIX = ".c4wal"
_FULL = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Pos:
    """Where a record lives: its segment, its offset there and its length, header included."""

    segment: int
    offset: int
    length: int


Body = bytes | Sequence[bytes]  # a record's body, whole or in parts (written without joining)


def _parts(body: Body) -> list[bytes]:
    return [body] if isinstance(body, bytes | bytearray | memoryview) else list(body)


_KIND_CRC = [zlib.crc32(bytes((k,))) for k in range(256)]


def record_header(kind: int, parts: Sequence[bytes]) -> bytes:
    crc = _KIND_CRC[kind]
    for part in parts:
        crc = zlib.crc32(part, crc)
    return HEADER.pack(MAGIC, sum(len(p) for p in parts), crc, kind)



def _check(data: bytes | memoryview, off: int) -> tuple[int, int] | None:
    """(kind, end) of a sound record at ``off`` of ``data``, else None."""
    if len(data) - off < HEADER.size:
        return None
    magic, length, crc, kind = HEADER.unpack_from(data, off)
    end = off + HEADER.size + length
    if magic != MAGIC or length > MAX_RECORD or end > len(data):
        return None
    body = data[off + HEADER.size:end]
    if zlib.crc32(body, zlib.crc32(bytes((kind,)))) != crc:
        return None
    return kind, end


def segment_size_for(directory: Path, max_bytes: int, ceiling: int = 16 << 20) -> int:
    """A segment size that lets the log reclaim space in steps small against what it may use:
    at most an eighth of ``max_bytes`` and of the free space, between 64 KiB and ``ceiling``."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        free = max_bytes
    return max(64 << 10, min(ceiling, max_bytes // 8, free // 8))


class Log:
    """Numbered segment files in ``directory``; see module docstring. Thread-safe."""

    def __init__(self, directory: Path, *, max_bytes: int, segment_bytes: int = 0) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or segment_size_for(self.dir, max_bytes)
        self._lock = threading.Lock()
        self._sizes: dict[int, int] = {}
        for path in self.dir.glob(f"*{SUFFIX}"):
            try:
                self._sizes[int(path.stem)] = path.stat().st_size
            except ValueError:
                log.warning("ignoring %s in the spill directory: not a segment name", path.name)
        self.bytes = sum(self._sizes.values())
        self._next = max(self._sizes, default=0) + 1
        self._current: int | None = None  # the segment appended to, once one is open
        self._fd: int | None = None
        self._dirty: set[int] = set()     # segments written since they were last synced
        self._dir_dirty = False           # a segment was created since the last sync
        self._readers: dict[int, int] = {}
        self.corrupt_regions = 0  # stretches of bad bytes skipped by scan()

    # -- layout ------------------------------------------------------------------------------
    def path(self, segment: int) -> Path:
        return self.dir / f"{segment:012d}{SUFFIX}"

    def segments(self) -> list[int]:
        """Segment numbers, oldest first."""
        with self._lock:
            return sorted(self._sizes)

    @property
    def current(self) -> int | None:
        return self._current

    # -- writing -----------------------------------------------------------------------------
    def append(self, records: Sequence[tuple[int, Body]], *, reserve: int = 0) -> list[Pos]:
        """Append ``(kind, body)`` records with one write; return their positions. A body may
        be a sequence of parts: they are checksummed and written in place, never joined.

        ``reserve``: bytes of ``max_bytes`` this append must leave free (frames leave room for
        the small records that complete them). Raises ``LogFull`` (nothing written) when the
        records do not fit or the disk is full, ``LogError`` on any other write failure.
        """
        chunks: list[bytes] = []
        lengths: list[int] = []
        for kind, body in records:
            parts = _parts(body)
            chunks.append(record_header(kind, parts))
            chunks.extend(parts)
            lengths.append(HEADER.size + sum(len(p) for p in parts))
        segment, start = self._put(chunks, sum(lengths), reserve)
        out, off = [], start
        for length in lengths:
            out.append(Pos(segment, off, length))
            off += length
        return out

    def append_one(self, kind: int, head: bytes, body: bytes, *, reserve: int = 0) -> Pos:
        """``append`` of one record whose body is ``head + body``, without building lists: the
        path every collector frame takes."""
        crc = zlib.crc32(body, zlib.crc32(head, _KIND_CRC[kind]))
        size = HEADER.size + len(head) + len(body)
        header = HEADER.pack(MAGIC, size - HEADER.size, crc, kind)
        segment, start = self._put([header, head, body], size, reserve)
        return Pos(segment, start, size)

    def _put(self, chunks: list[bytes], size: int, reserve: int) -> tuple[int, int]:
        """Write ``chunks`` (``size`` bytes in all) at the end of the log, leaving ``reserve``
        bytes of the limit free; their segment and offset."""
        with self._lock:
            if self.bytes + size > self.max_bytes - reserve:
                raise LogFull(f"the spill holds {self.bytes} of its {self.max_bytes} bytes "
                              "(--spill-max-bytes); it frees up as the daemon acknowledges")
            fd, segment = self._writable(size)
            start = self._sizes[segment]
            self._write(fd, segment, start, chunks, size)
            self._sizes[segment] = start + size
            self.bytes += size
            self._dirty.add(segment)
        return segment, start

    def _writable(self, size: int) -> tuple[int, int]:
        if self._fd is not None and self._current is not None and \
                self._sizes[self._current] + size > self.segment_bytes and \
                self._sizes[self._current] > 0:
            self._seal()
        if self._fd is None:
            segment = self._next
            path = self.path(segment)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND |
                             os.O_CLOEXEC, 0o600)
            except OSError as exc:
                if exc.errno in _FULL:
                    raise LogFull(f"cannot create spill segment {path}: {exc.strerror}; free "
                                  "disk space there") from exc
                raise LogError(f"cannot create spill segment {path}: {exc}") from exc
            self._next += 1
            self._fd, self._current = fd, segment
            self._sizes[segment] = 0
            self._dir_dirty = True
        assert self._fd is not None and self._current is not None
        return self._fd, self._current

    def _write(self, fd: int, segment: int, start: int, chunks: list[bytes], size: int) -> None:
        done = 0
        try:
            done = os.writev(fd, chunks)
            if done < size:  # short write (rare): the rest, joined
                rest = memoryview(b"".join(chunks))
                while done < size:
                    done += os.write(fd, rest[done:])
        except OSError as exc:
            try:
                os.ftruncate(fd, start)  # never leave a partial record behind
            except OSError as cut:
                log.error("cannot cut spill segment %s back after a failed write (%s); "
                          "starting a new segment", self.path(segment).name, cut)
                self._sizes[segment] = start + done  # the torn bytes are skipped when read
                self.bytes += done
                self._seal()
            if exc.errno in _FULL:
                raise LogFull(f"the disk holding the spill ({self.dir}) is full; records "
                              "are dropped (and counted) until space returns") from exc
            raise LogError(f"writing spill segment {self.path(segment)} failed: {exc}") from exc

    def _seal(self) -> None:
        """Finish the current segment, so that the next append opens a new one."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd, self._current = None, None

    def _sync_dir(self) -> None:
        try:
            dfd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def sync(self) -> None:
        """Make every record appended so far durable; raises OSError if the disk fails."""
        with self._lock:
            # fsync duplicates outside the lock: appends go on meanwhile, and a concurrent
            # seal() or remove() may close the originals
            fds: list[int] = []
            for segment in sorted(self._dirty):
                with contextlib.suppress(FileNotFoundError):
                    fds.append(os.dup(self._fd) if segment == self._current and
                               self._fd is not None else
                               os.open(self.path(segment), os.O_RDONLY | os.O_CLOEXEC))
            self._dirty.clear()
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        try:
            for fd in fds:
                os.fdatasync(fd)  # data and size; an mtime alone is not worth a journal commit
        finally:
            for fd in fds:
                os.close(fd)
        if dir_dirty:
            self._sync_dir()  # the new segments' names

    # -- reading -----------------------------------------------------------------------------
    def read(self, pos: Pos) -> tuple[int, bytes]:
        """The ``(kind, body)`` at ``pos``; raises ``LogCorrupt`` if it does not check out."""
        with self._lock:
            fd = self._readers.get(pos.segment)
            if fd is None:
                try:
                    fd = os.open(self.path(pos.segment), os.O_RDONLY | os.O_CLOEXEC)
                except OSError as exc:
                    raise LogCorrupt(f"spill segment {pos.segment} is gone: {exc}") from exc
                self._readers[pos.segment] = fd
            try:
                data = os.pread(fd, pos.length, pos.offset)
            except OSError as exc:
                raise LogCorrupt(f"reading spill segment {pos.segment} failed: {exc}") from exc
        checked = _check(data, 0)
        if checked is None or checked[1] != pos.length:
            raise LogCorrupt(f"record at {pos.offset} of spill segment {pos.segment} fails its "
                             "checksum")
        return checked[0], data[HEADER.size:]

    def scan(self, segment: int) -> Iterator[tuple[Pos, int, bytes]]:
        """Every sound record of ``segment`` in order, skipping corrupt stretches (logged)."""
        try:
            data = self.path(segment).read_bytes()
        except OSError as exc:
            log.error("cannot read spill segment %s: %s", segment, exc)
            return
        off = 0
        while off < len(data):
            checked = _check(data, off)
            if checked is not None:
                kind, end = checked
                yield Pos(segment, off, end - off), kind, data[off + HEADER.size:end]
                off = end
                continue
            nxt = data.find(MAGIC, off + 1)
            while nxt >= 0 and _check(data, nxt) is None:
                nxt = data.find(MAGIC, nxt + 1)
            stop = len(data) if nxt < 0 else nxt
            if nxt < 0 and data.startswith(MAGIC, off):
                log.info("spill segment %s ends with a record cut short by a crash (%d bytes)",
                         segment, stop - off)
            elif data[off:stop].strip(b"\0"):
                self.corrupt_regions += 1
                log.error("spill segment %s: %d corrupt bytes at offset %d skipped; the "
                          "records after them are kept", segment, stop - off, off)
            off = stop

    # -- reclaiming --------------------------------------------------------------------------
    def remove(self, segment: int) -> None:
        with self._lock:
            if segment == self._current:
                if self._fd is not None:
                    os.close(self._fd)
                self._fd, self._current = None, None
            self._dirty.discard(segment)  # deleted before it was synced: never written out
            fd = self._readers.pop(segment, None)
            if fd is not None:
                os.close(fd)
            size = self._sizes.pop(segment, 0)
            self.bytes = max(0, self.bytes - size)
        try:
            self.path(segment).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("cannot remove spill segment %s: %s", segment, exc)

    def close(self) -> None:
        with self._lock:
            self._seal()
            for fd in self._readers.values():
                os.close(fd)
            self._readers.clear()
