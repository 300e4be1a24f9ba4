"""``ncclras -m`` monitor events (NCCL 2.29+), text and JSON.

Text: ``[%F %T] <EVENT>: <peer> <details>``, the peer being ``Process <pid> on node <ip>
managing GPU[s] <list>`` or an address ``<ip><port>``; NCCL leaves a trailing space when there
are no details. JSON: one pretty-printed object per event (``timestamp``, ``group``,
``event``, ``peer`` with ``host``/``pid``/``cuda_devs``/``nvml_devs`` or ``addr``,
``details``). The client prints a two-line banner to standard error; if it was captured too,
it is skipped.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnosis.nccl.problems import Problems

__all__ = ["LIFECYCLE", "TRACE", "RasEvent", "parse_monitor", "read_monitor_file"]

LIFECYCLE = ("PEER_NEW", "PEER_DEAD")
TRACE = ("PEER_CONNECTING", "PEER_UNRESPONSIVE", "PEER_RETRY", "PEER_SEND_STUCK",
         "PEER_TIMEOUT_DEAD", "PEER_INIT_TIMEOUT", "PEER_DISCONNECTED")
#: events that say a peer is gone or cannot be reached
BAD = frozenset({"PEER_DEAD", "PEER_TIMEOUT_DEAD", "PEER_UNRESPONSIVE", "PEER_SEND_STUCK",
                 "PEER_INIT_TIMEOUT", "PEER_DISCONNECTED"})

_TEXT = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] ([A-Z_]+): (.*)$")
_PROC = re.compile(r"^Process (\d+) on node (\S+) managing GPUs? ([\d,\s]+?)(?:\s+(.*))?$")
_ADDR = re.compile(r"^(\S+?<\d+>)(?:\s+(.*))?$")


@dataclass(frozen=True)
class RasEvent:
    """One monitor event; ``host``/``pid``/``gpus`` when the peer is a process, ``addr``
    when it is only an address. ``t_ns`` is the event's local time as epoch ns."""

    source: str
    line: int
    t_ns: int | None
    group: str
    event: str
    host: str | None = None
    pid: int | None = None
    gpus: tuple[int, ...] = ()
    addr: str | None = None
    details: str = ""

    @property
    def bad(self) -> bool:
        return self.event in BAD


def _local_ns(stamp: str) -> int | None:
    try:
        return int(time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) * 1e9)
    except ValueError:
        return None


def _group(event: str) -> str:
    return "LIFECYCLE" if event in LIFECYCLE else "TRACE"


def parse_monitor(text: str, source: str = "",
                  problems: Problems | None = None) -> list[RasEvent]:
    """Every event in ``text`` (text lines or JSON objects, as the client printed them)."""
    problems = problems if problems is not None else Problems()
    if text.lstrip().startswith("{"):
        return _json_events(text, source, problems)
    out = []
    for no, raw in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
        s = raw.rstrip("\n")
        if not s.strip() or s.startswith("RAS Monitor Mode") or set(s.strip()) <= {"="}:
            continue
        m = _TEXT.match(s)
        if not m:
            problems.add(source, no, "ras_event", f"not a monitor event: {s[:80]!r} (skipped)")
            continue
        stamp, event, rest = m.groups()
        peer = _PROC.match(rest)
        if peer:
            gpus = tuple(int(x) for x in re.findall(r"\d+", peer.group(3)))
            out.append(RasEvent(source, no, _local_ns(stamp), _group(event), event,
                                host=peer.group(2), pid=int(peer.group(1)), gpus=gpus,
                                details=(peer.group(4) or "").strip()))
            continue
        addr = _ADDR.match(rest)
        out.append(RasEvent(source, no, _local_ns(stamp), _group(event), event,
                            addr=addr.group(1) if addr else None,
                            details=((addr.group(2) if addr else rest) or "").strip()))
    return out


def _json_events(text: str, source: str, problems: Problems) -> list[RasEvent]:
    dec = json.JSONDecoder()
    pos = 0
    out: list[RasEvent] = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        no = text.count("\n", 0, pos) + 1
        if text[pos] != "{":     # the banner, if it was captured with the events
            nxt = text.find("\n", pos)
            pos = len(text) if nxt < 0 else nxt + 1
            continue
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError:
            problems.add(source, no, "ras_event", "a monitor event cut short: the rest of the "
                         "file is skipped")
            return out
        out.append(_event(obj, source, no))


def _event(o: dict[str, Any], source: str, line: int) -> RasEvent:
    peer = o.get("peer") or {}
    event = str(o.get("event", ""))
    return RasEvent(source, line, _local_ns(str(o.get("timestamp", ""))),
                    str(o.get("group") or _group(event)), event,
                    host=peer.get("host"), pid=peer.get("pid"),
                    gpus=tuple(int(x) for x in peer.get("cuda_devs") or ()),
                    addr=peer.get("addr"), details=str(o.get("details", "")))


def read_monitor_file(path: str | Path, problems: Problems | None = None) -> list[RasEvent]:
    p = Path(path)
    return parse_monitor(p.read_text(errors="replace"), str(p), problems)
