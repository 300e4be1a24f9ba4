"""Ask NCCL RAS for its status, as ``ncclras`` does, and poll it at a set interval.

RAS listens on ``NCCL_RAS_ADDR`` (default ``localhost:28028``; ``host:port`` or
``[v6]:port``). The protocol is lines of text over TCP: the client says ``CLIENT PROTOCOL 2``
and the server ``SERVER PROTOCOL 2``; ``TIMEOUT <s>`` and ``SET FORMAT json`` are each
answered ``OK``; then ``STATUS`` (or ``VERBOSE STATUS``) makes the server send the report and
close the connection. Errors come back as ``ERROR: …``. A server older than 2.28.7 answers
``SET FORMAT`` with an error: the client then asks for the text report.

:class:`RasPoller` takes a report every ``interval_s`` and stamps it with the time it asked
(the text report has none); the connection is made by an injectable function, so tests talk to
a fake server that replays recorded reports.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from diagnosis.errors import DiagnosisError
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.ras import RasSnapshot, parse_ras

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_PORT", "RasClient", "RasError", "RasPoller", "ras_address"]

DEFAULT_PORT = 28028
PROTOCOL = 2
REPLY_SLACK_S = 5.0


class RasError(DiagnosisError):
    """RAS could not be asked (no server, a refusal, a broken reply); says what to check."""


def ras_address(value: str | None = None) -> tuple[str, int]:
    """``NCCL_RAS_ADDR`` (or ``value``) as (host, port): ``host``, ``host:port``,
    ``[v6]:port``; default ``localhost:28028``."""
    text = (value if value is not None else os.environ.get("NCCL_RAS_ADDR", "")).strip()
    if not text:
        return "localhost", DEFAULT_PORT
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    try:
        return host or "localhost", int(port) if port else DEFAULT_PORT
    except ValueError:
        raise RasError(f"NCCL_RAS_ADDR {text!r} is not host:port") from None


Connect = Callable[[tuple[str, int], float], socket.socket]


@dataclass
class RasClient:
    """One question to RAS per call. ``connect`` opens the connection (tests: a fake)."""

    address: tuple[str, int] = field(default_factory=ras_address)
    timeout_s: float = 5.0
    connect: Connect = socket.create_connection
    json_ok: bool = True            # False once the server refused SET FORMAT json

    def status(self, verbose: bool = False) -> tuple[str, str]:
        """The report's text and its format (``json`` or ``text``).

        Raises:
            RasError: no server, a refused handshake, an error reply, or no report."""
        try:
            return self._status(verbose)
        except OSError as exc:
            host, port = self.address
            raise RasError(f"cannot ask NCCL RAS at {host}:{port} ({exc}): is a job using NCCL "
                           "2.24+ running on this node, with RAS on (NCCL_RAS_ENABLE) and "
                           "NCCL_RAS_ADDR the same as the job's?") from None

    def _status(self, verbose: bool) -> tuple[str, str]:
        with self.connect(self.address, self.timeout_s) as sock:
            # RAS gathers for up to TIMEOUT twice (its network, then the communicators) before
            # it answers: the report of a job with a stopped process comes only then
            sock.settimeout(2 * self.timeout_s + REPLY_SLACK_S)
            rf = sock.makefile("rb")
            self._ask(sock, rf, f"CLIENT PROTOCOL {PROTOCOL}", "SERVER PROTOCOL")
            if self.timeout_s:
                self._ask(sock, rf, f"TIMEOUT {max(1, int(self.timeout_s))}", "OK")
            fmt = "text"
            if self.json_ok:
                reply = self._line(sock, rf, "SET FORMAT json")
                if reply.startswith("OK"):
                    fmt = "json"
                else:
                    self.json_ok = False
                    log.info("NCCL RAS at %s:%d refused the JSON format (%s): asking for "
                             "text reports", *self.address, reply)
            sock.sendall(b"VERBOSE STATUS\n" if verbose else b"STATUS\n")
            body = rf.read().decode("utf-8", "replace")
        if body.startswith("ERROR"):
            raise RasError(f"NCCL RAS refused the status request: {body.strip()}")
        if not body.strip():
            raise RasError("NCCL RAS closed the connection without a report")
        return body, fmt

    @staticmethod
    def _line(sock: socket.socket, rf: BinaryIO, command: str) -> str:
        sock.sendall(command.encode() + b"\n")
        return rf.readline().decode("utf-8", "replace").strip()

    def _ask(self, sock: socket.socket, rf: BinaryIO, command: str, expect: str) -> None:
        reply = self._line(sock, rf, command)
        if not reply.startswith(expect):
            raise RasError(f"NCCL RAS answered {reply!r} to {command!r} (expected {expect!r}): "
                           "not a RAS server, or an incompatible NCCL version")


@dataclass
class RasPoller:
    """A RAS report every ``interval_s`` seconds (``poll`` returns None until one is due).
    ``clock`` gives wall-clock seconds, the time stamped on each report."""

    client: RasClient = field(default_factory=RasClient)
    interval_s: float = 10.0
    clock: Callable[[], float] = time.time
    problems: Problems = field(default_factory=Problems)
    _last: float | None = None
    failures: int = 0
    reports: int = 0

    def poll(self, force: bool = False) -> list[RasSnapshot]:
        """The report taken now if one is due (or ``force``): usually one snapshot; none when
        not due or when RAS could not be asked (logged once per run of failures)."""
        now = self.clock()
        if not force and self._last is not None and now - self._last < self.interval_s:
            return []
        self._last = now
        try:
            body, _ = self.client.status()
        except RasError as exc:
            if not self.failures:
                log.warning("%s", exc)
            self.failures += 1
            return []
        if self.failures:
            log.info("NCCL RAS answers again after %d failed polls", self.failures)
        self.failures = 0
        snaps = parse_ras(body, f"ncclras@{self.client.address[0]}:{self.client.address[1]}",
                          int(now * 1e9), self.problems)
        # a JSON report is stamped by RAS to the second: the poll's own time is finer
        snaps = [s if s.format == "text" else _restamp(s, int(now * 1e9)) for s in snaps]
        self.reports += len(snaps)
        return snaps


def _restamp(s: RasSnapshot, t_ns: int) -> RasSnapshot:
    from dataclasses import replace

    return replace(s, t_ns=t_ns)
