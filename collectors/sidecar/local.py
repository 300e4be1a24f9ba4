"""The sidecar's Unix socket, where the node's ranks deliver their frames.

One thread serves every collector connection through a selector: a node may run many ranks
(and a load test thousands), and a thread per connection would cost a stack and a scheduler
slot each for sockets that are idle almost all the time.

Trust: the socket is created with the mode and group the operator sets (never wider while it
is being set up), in a directory no other user can swap it in, and every connection's peer
credentials (SO_PEERCRED: uid, gid, pid) go with each frame it sends; ``intake.py`` decides
what each user may say.

Bounds: a connection that announces a frame over ``max_frame_bytes``, sends bytes that do not
parse, or keeps a frame unfinished for ``frame_timeout_s`` is closed; so is the one holding the
most unfinished bytes when all connections together hold more than ``max_buffered_bytes``, and
any connection beyond ``max_connections``. Each reason is counted and logged at most once per
10 s, however many connections earn it.

Acknowledgements (``collectors/wire.py``): when ``on_frame`` returns a ``Receipt`` (the frame
is in the log, or refused, or dropped and counted), the collector is told at the end of the
pass, one cumulative acknowledgement per connection.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import selectors
import socket
import stat
import struct
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from c4.proto import c4_pb2
from c4.ratelog import RateLimitedLog
from collectors.sidecar.errors import SocketSetupError
from collectors.sidecar.intake import Peer, Receipt
from collectors.wire import FrameError, encode_ack, split_frames

log = logging.getLogger(__name__)

# takes one frame's payload; raises FrameError if it is not a collector frame
Handler = Callable[[Peer, bytes], Receipt | None]

_RECV_BYTES = 1 << 20
_HELLO = encode_ack(c4_pb2.IngestAck())
_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid
# Acknowledgements a peer may leave unread before it is taken for one that never reads them.
_MAX_UNSENT_ACK_BYTES = 64 << 10

CLOSE_REASONS = {
    "frame_too_large": "announced a frame over --max-frame-bytes",
    "unparsable": "sent bytes that are not a collector frame",
    "stalled": "left a frame unfinished for longer than the frame timeout",
    "buffer_budget": "held the most unfinished bytes when all connections held too many",
    "too_many": "came beyond the connection limit",
    "unread_acks": "never read its acknowledgements",
}


@dataclass(frozen=True)
class Limits:
    max_frame_bytes: int = 16 << 20
    max_buffered_bytes: int = 64 << 20
    frame_timeout_s: float = 10.0
    max_connections: int = 4096


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: Peer
    buf: bytearray = field(default_factory=bytearray)
    partial_since: float | None = None  # when the unfinished frame in ``buf`` began
    pending: deque[Receipt] = field(default_factory=deque)
    unsent: bytes = b""


def parse_mode(text: str) -> int:
    """An octal permission mode such as ``0660``; raises ValueError."""
    try:
        mode = int(str(text), 8)
    except ValueError:
        raise ValueError(f"socket mode {text!r} is not an octal mode such as 0660") from None
    if mode & ~0o777:
        raise ValueError(f"socket mode {text!r} has bits beyond 0777")
    return mode


def resolve_group(group: str) -> int | None:
    """A group name or number as a gid; "" means none (the group the socket is created with)."""
    if not group:
        return None
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"socket group {group!r} does not exist on this node") from None


def _check_directory(directory: Path) -> None:
    st = directory.stat()
    if st.st_uid not in (0, os.geteuid()):
        raise SocketSetupError(
            f"the socket directory {directory} belongs to uid {st.st_uid}, who could replace "
            "the socket with their own: use a directory owned by the sidecar's user or root")
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise SocketSetupError(
            f"the socket directory {directory} is writable by every user without the sticky "
            "bit: anyone could replace the socket; use a directory such as /run/c4")


def bind_socket(path: Path, mode: int, gid: int | None) -> socket.socket:
    """A listening Unix socket at ``path`` with exactly ``mode`` and group ``gid``."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    _check_directory(path.parent)
    if path.is_symlink() or (path.exists() and not stat.S_ISSOCK(path.lstat().st_mode)):
        raise SocketSetupError(f"{path} exists and is not a socket: remove it or choose "
                               "another --socket")
    if path.exists():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # left by a sidecar that is gone
        else:
            raise SocketSetupError(f"another sidecar already listens on {path}: stop it or "
                                   "choose another --socket")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Created owner-only, then opened up to ``mode``: never wider than asked, even briefly.
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    try:
        if gid is not None:
            os.chown(path, -1, gid)
        os.chmod(path, mode)
    except OSError as exc:
        sock.close()
        path.unlink()
        raise SocketSetupError(f"cannot give {path} group {gid} and mode {mode:o}: {exc}; the "
                               "sidecar's user must belong to that group") from exc
    return sock


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, as the kernel saw it connect."""
    try:
        return _CREDS.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                             _CREDS.size))
    except OSError:
        return -1, -1, -1


class LocalListener:
    """Accepts collector connections on ``path`` and hands every frame to ``on_frame``."""

    def __init__(self, path: Path, on_frame: Handler, *, mode: int = 0o660,
                 gid: int | None = None, limits: Limits | None = None) -> None:
        self.path = Path(path)
        self.limits = limits or Limits()
        self._on_frame = on_frame
        self._listen = bind_socket(self.path, mode, gid)
        self._listen.listen(socket.SOMAXCONN)
        self._listen.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._scratch = memoryview(bytearray(_RECV_BYTES))   # the serving thread's
        self._selector.register(self._listen, selectors.EVENT_READ, None)
        # a self-pipe wakes the loop (stop, acknowledgements due) without a polling timeout
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._conns: set[_Conn] = set()
        self._awaiting: set[_Conn] = set()   # connections with acknowledgements to come
        self._partial: set[_Conn] = set()    # connections holding an unfinished frame
        self._buffered = 0                   # unfinished bytes over all connections
        self._lock = threading.Lock()
        self.closed: dict[str, int] = {}     # connections closed by this side, by reason
        self.accepted = 0
        self._stopping = False
        self._rated = RateLimitedLog(log)
        self._thread = threading.Thread(target=self._serve, name="c4-local", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")


    def connections(self) -> int:
        return len(self._conns)

    def stop(self) -> None:
        """Stop serving, after taking what the ranks had already written."""
        self._stopping = True
        self.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._drain()
        self._send_acks()
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                # typed as a bare fd too; this selector registers only socket objects
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._wake_w.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _drain(self, budget_s: float = 2.0) -> None:
        """Take what the ranks had already written when the sidecar was told to stop: it left
        them as sent, and only this process can still read it."""
        deadline = time.monotonic() + budget_s
        scratch = memoryview(bytearray(_RECV_BYTES))   # the serving thread may not have ended
        for conn in list(self._conns):
            while conn in self._conns and time.monotonic() < deadline:
                if not self._read(conn, scratch):
                    break

    # -- the loop ----------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stopping:
            partial = bool(self._partial)
            for key, _ in self._selector.select(1.0 if partial else None):
                if key.fileobj is self._listen:
                    self._accept()
                elif key.fileobj is self._wake_r:
                    with contextlib.suppress(OSError):
                        while self._wake_r.recv(4096):
                            pass
                    if self._stopping:
                        return
                else:
                    self._read(key.data)
            if partial:
                self._expire_stalled()
            if self._awaiting:
                self._send_acks()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: keep serving the others
                self._rated.warning("accept", "cannot accept a collector connection: %s", exc)
                return
            pid, uid, gid = peer_credentials(sock)
            if len(self._conns) >= self.limits.max_connections:
                self._count_close("too_many")
                self._rated.warning("too_many", "closing a connection from uid %d pid %d: %d "
                                    "connections already (the limit)", uid, pid, len(self._conns))
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Conn(sock, Peer(uid=uid, pid=pid, gid=gid))
            # hello: this sidecar acknowledges frames, so the collector may send again those
            # it does not acknowledge (an older collector never reads it)
            self._send(conn, _HELLO)
            self._conns.add(conn)
            self.accepted += 1
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn, scratch: memoryview | None = None) -> bool:
        """Read once from ``conn`` and take its complete frames; False if nothing was read.
        ``scratch``: where to read (default: the serving thread's buffer)."""
        # into a buffer kept from read to read: a fresh recv(1 MiB) allocates and shrinks a
        # 1 MiB object per read, which costs more than the few KiB a read brings
        scratch = self._scratch if scratch is None else scratch
        try:
            n = conn.sock.recv_into(scratch)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            n = 0
        if not n:
            self._close(conn)
            return False
        chunk = scratch[:n]
        conn.buf += chunk
        held = len(conn.buf)
        try:
            payloads = split_frames(conn.buf, self.limits.max_frame_bytes)
        except FrameError as exc:
            self._buffered += len(conn.buf) - held + len(chunk)
            self._abuse(conn, "frame_too_large", str(exc))
            return False
        self._buffered += len(conn.buf) - held + len(chunk)
        for payload in payloads:
            try:
                receipt = self._on_frame(conn.peer, payload)
            except FrameError as exc:
                self._abuse(conn, "unparsable", str(exc))
                return False
            except Exception:
                # its collector learns the frame's fate from the next acknowledgement
                self._rated.warning("failed", "could not take a frame from uid %d pid %d: %s",
                                    conn.peer.uid, conn.peer.pid, traceback.format_exc())
                continue
            if receipt is not None:
                conn.pending.append(receipt)
                self._awaiting.add(conn)
        if payloads:
            conn.partial_since = time.monotonic() if conn.buf else None
        elif conn.partial_since is None:
            conn.partial_since = time.monotonic()
        if conn.partial_since is None:
            self._partial.discard(conn)
        else:
            self._partial.add(conn)
        if self._buffered > self.limits.max_buffered_bytes:
            worst = max(self._conns, key=lambda c: len(c.buf))
            self._abuse(worst, "buffer_budget",
                        f"{len(worst.buf)} unfinished bytes of {self._buffered} over all "
                        f"connections (limit {self.limits.max_buffered_bytes})")
        return True

    def _expire_stalled(self) -> None:
        now = time.monotonic()
        for conn in list(self._partial):
            if conn.partial_since is not None and \
                    now - conn.partial_since > self.limits.frame_timeout_s:
                self._abuse(conn, "stalled", f"{len(conn.buf)} bytes of an unfinished frame "
                            f"for over {self.limits.frame_timeout_s:g} s")

    def _send_acks(self) -> None:
        for conn in list(self._awaiting):
            out: list[bytes] = []
            top: Receipt | None = None
            while conn.pending:
                r = conn.pending.popleft()
                if r.code:
                    out.append(encode_ack(c4_pb2.IngestAck(seq=r.fno, sidecar=r.cid,
                                                           code=r.code, error=r.error)))
                top = r
            if top is not None:  # cumulative: every frame up to this one is settled
                out.append(encode_ack(c4_pb2.IngestAck(seq=top.fno, sidecar=top.cid)))
            self._awaiting.discard(conn)
            if out or conn.unsent:
                self._send(conn, conn.unsent + b"".join(out))

    def _send(self, conn: _Conn, data: bytes) -> None:
        try:
            sent = conn.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return  # gone: its read side notices
        conn.unsent = data[sent:]
        if len(conn.unsent) > _MAX_UNSENT_ACK_BYTES:
            self._abuse(conn, "unread_acks", f"{len(conn.unsent)} bytes of acknowledgements "
                        "unread")

    # -- closing -----------------------------------------------------------------------------
    def _count_close(self, reason: str) -> None:
        with self._lock:
            self.closed[reason] = self.closed.get(reason, 0) + 1

    def _abuse(self, conn: _Conn, reason: str, detail: str) -> None:
        self._count_close(reason)
        self._rated.warning(reason, "closing the connection of uid %d pid %d, which %s: %s",
                            conn.peer.uid, conn.peer.pid, CLOSE_REASONS[reason], detail)
        self._close(conn)

    def _close(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()
        self._buffered -= len(conn.buf)
        conn.buf = bytearray()
        self._conns.discard(conn)
        self._awaiting.discard(conn)
        self._partial.discard(conn)
