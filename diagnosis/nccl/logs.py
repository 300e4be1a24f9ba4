"""Job logs: ``NCCL_DEBUG`` lines and PyTorch's ProcessGroupNCCL watchdog lines.

``NCCL_DEBUG`` lines are ``[ts ]<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <msg>`` and
``… [<cudaDev>] <file>:<line>[ (<func>)] NCCL WARN <msg>``, possibly behind a launcher's prefix
(``[1,0]<stdout>:``, ``0: ``, ``(Worker pid=…) ``). Of them this reader keeps:

* ``NET/IB : Using [0]mlx5_0:1/IB …; OOB eth0:10.2.0.4<0>``: the NICs the process may use and
  its node's address (which ties RAS's addresses to hostnames); ``NET/Socket : Using
  [0]eth0:10.2.0.4<0> …`` likewise where NCCL runs over TCP;
* ``… commId 0x… - Init COMPLETE`` (``comm %p rank R nranks N cudaDev D``): a process's rank in a
  communicator and its GPU;
* every ``WARN``, with the IB completion errors (three wordings across versions: peer, work
  completion status, direction, HCA) and socket connect failures read into fields;
* ``<file>:<line> -> <ncclResult>`` error propagation lines (counted per process).

PyTorch's lines: the watchdog timeout (``WorkNCCL(SeqNum=…, OpType=…, …) ran for … ms``), the
``failure detected by watchdog at work sequence id`` status (and its older wordings), and the
``TORCH_NCCL_DESYNC_DEBUG`` report that names the lagging ranks. PyTorch's ``SeqNum`` counts
the process group's calls of every type (1-based) and ``[Rank R]`` is the rank in the process
group; ``[rankG]:`` in the glog prefix is the global rank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from diagnosis.nccl.ids import comm_hash, op_name
from diagnosis.nccl.problems import Problems

__all__ = ["CommInit", "DesyncReport", "LogFacts", "NcclWarn", "NetUse", "WatchdogStatus",
           "WatchdogTimeout", "parse_logs", "read_logs"]

#: ``enum ibv_wc_status`` names
WC_STATUS = ("SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
             "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
             "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR",
             "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR",
             "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR")

_LAUNCHER = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+: |\(\w+ pid=\d+[^)]*\) )+")
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\] ")
_NCCL = re.compile(
    r"^(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>-?\d+)\] "
    r"(?:[\d.]+ )?(?:(?P<file>[^\s:]+):(?P<fline>\d+) (?:\((?P<func>[^)]*)\) )?)?"
    r"NCCL (?P<level>INFO|WARN|TRACE) (?P<msg>.*)$")
_NET_IB = re.compile(r"NET/IB ?: Using(?P<devs>.*?)(?:\s*\[RO\])?\s*;\s*OOB (?P<if>[^:\s]+):"
                     r"(?P<ip>[^<\s]+)<\d+>")
_IB_DEV = re.compile(r"\[(\d+)\]([^:\s\]]+):(\d+)(?::[\d:]*)?/(\w+)")
_NET_SOCKET = re.compile(r"NET/Socket ?: Using(?P<devs>(?: \[\d+\]\S+)+)\s*$")
# an interface and its address, IPv6 ones included (colons), up to the port
_SOCKET_DEV = re.compile(r"\[(\d+)\]([^:\s]+):(\S+?)<\d+>")
_INIT = re.compile(r"comm (?:0x)?[0-9a-fA-F]+ rank (\d+) nranks (\d+) cudaDev (\d+)"
                   r"(?: nvmlDev \d+)?(?: busId \w+)? commId (0x[0-9a-fA-F]+) - Init COMPLETE")
_PEER = re.compile(r"from peer (?P<addr>[\w.:\[\]-]+?)<(?P<port>\d+)>")
_STATUS = re.compile(r"with (?:error (\d+)|status=(?:(\w+)\((\d+)\)|(\d+)))")
_VENDOR = re.compile(r"vendor[ _]err[= ](\d+)")
_DIRECTION = re.compile(r"\((Send|Recv)\)")
_HCA = re.compile(r"hca (\S+)")
_CONNECT = re.compile(r"Connect to (?P<addr>[\w.:\[\]-]+?)<(?P<port>\d+)> failed\s*:\s*(?P<why>.*)")
_PROPAGATE = re.compile(r"^(\S+):(\d+) -> (\d+)")

_GLOG = re.compile(r"^\[rank(\d+)\]:\[[EWIF](\d{3,4}) ([\d:.]+) [\w.]+:\d+\] |"
                   r"^\[[EWIF] [\w.]+:\d+\] ")
_TIMEOUT = re.compile(
    r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), "
    r"OpType=(\w+)(?:, NumelIn=(-?\d+), NumelOut=(-?\d+))?, Timeout\(ms\)=(\d+)\) ran for "
    r"(\d+) milliseconds before timing out")
_FAILURE = re.compile(
    r"\[PG ID (\S+) PG GUID (\S+?)(?:\(([^)]*)\))? Rank (\d+)\]\s+failure detected by watchdog "
    r"at work sequence id: (\d+) PG status: last enqueued work: (-?\d+), last completed work: "
    r"(-?\d+)")
_FAILURE_OLD = re.compile(
    r"\[PG (?:ID )?(\S+?)(?: PG GUID (\S+?)(?:\(([^)]*)\))?)? Rank (\d+)\]\s+(?:Exception \(either "
    r"an error or timeout\) detected by watchdog at work|Timeout at NCCL work): (\d+), last "
    r"enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)")
_DESYNC = re.compile(r"^\s*-\s*\[(\d+)\] Timeout at collective: (\w+), #(\d+)")
_DESYNC_HEAD = re.compile(r"^\s*-\s*To our best knowledge, the lagging/dead/mismatched ranks")
_DESYNC_RANK = re.compile(r"^\s+\[(\d+)\] (.+)$")


@dataclass(frozen=True)
class Where:
    """The log line a fact came from, and the process that printed it (when the line says)."""

    source: str
    line: int
    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    stamp: str | None = None


@dataclass(frozen=True)
class NetUse:
    """``NET/IB : Using …``: the process's IB devices (index, name, port, link layer) and its
    node's out-of-band interface and address; or ``NET/Socket : Using …`` (NCCL over TCP, an
    Ethernet cluster without RDMA): its interfaces (index, name, port 0, ``Socket``), the first
    of them and its address standing for the node's."""

    where: Where
    devices: tuple[tuple[int, str, int, str], ...]
    oob_if: str
    oob_ip: str

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d[1] for d in self.devices)


@dataclass(frozen=True)
class CommInit:
    """``Init COMPLETE``: the process's rank in communicator ``comm`` of ``nranks``."""

    where: Where
    comm: int
    rank: int
    nranks: int
    cuda_dev: int


@dataclass(frozen=True)
class NcclWarn:
    """An ``NCCL WARN`` line. ``kind``: ``ib_completion``, ``socket_connect`` or ``other``; for
    the first two the peer's address and port; for IB completions the work completion status
    (number and ``ibv_wc_status`` name), vendor error, direction and local HCA where printed."""

    where: Where
    file: str
    file_line: int
    message: str
    kind: str = "other"
    peer_addr: str | None = None
    peer_port: int | None = None
    status: int | None = None
    status_name: str | None = None
    vendor_err: int | None = None
    direction: str | None = None
    hca: str | None = None


@dataclass(frozen=True)
class WatchdogTimeout:
    """PyTorch's watchdog caught a timeout: ``seq`` is PyTorch's 1-based work number in the
    process group (``pg_rank`` the rank in it); ``rank`` the global rank from the glog prefix."""

    where: Where
    rank: int | None
    pg_rank: int
    seq: int
    op: str
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int
    ran_ms: int


@dataclass(frozen=True)
class WatchdogStatus:
    """``failure detected by watchdog``: the failed work and how far the rank had got."""

    where: Where
    rank: int | None
    pg_id: str
    pg_desc: str | None
    pg_rank: int
    seq: int
    last_enqueued: int
    last_completed: int


@dataclass(frozen=True)
class DesyncReport:
    """``TORCH_NCCL_DESYNC_DEBUG``'s report: the rank timed out at collective #``seq`` (counted
    from 1) and the ranks it names as lagging, dead or mismatched, with what it says of each."""

    where: Where
    rank: int | None
    pg_rank: int
    op: str
    seq: int
    culprits: tuple[tuple[int, str], ...] = ()


@dataclass
class LogFacts:
    """What the logs said, by kind; ``errors_by_process`` counts ``-> <code>`` lines."""

    net: list[NetUse] = field(default_factory=list)
    inits: list[CommInit] = field(default_factory=list)
    warns: list[NcclWarn] = field(default_factory=list)
    timeouts: list[WatchdogTimeout] = field(default_factory=list)
    statuses: list[WatchdogStatus] = field(default_factory=list)
    desyncs: list[DesyncReport] = field(default_factory=list)
    errors_by_process: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)
    lines: int = 0

    def __len__(self) -> int:
        return (len(self.net) + len(self.inits) + len(self.warns) + len(self.timeouts)
                + len(self.statuses) + len(self.desyncs))


def parse_logs(lines: Iterable[str], source: str = "", facts: LogFacts | None = None,
               problems: Problems | None = None) -> LogFacts:
    """The facts of a log's lines (any other line is ignored)."""
    facts = facts if facts is not None else LogFacts()
    warn: tuple[NcclWarn, int] | None = None     # a WARN whose message may go on a next line
    desync: dict | None = None
    seen_timeouts: set[tuple] = set()
    for no, raw in enumerate(lines, 1):
        facts.lines += 1
        text = raw.rstrip("\r\n")
        body = _LAUNCHER.sub("", text)
        stamp = None
        if m := _STAMP.match(body):
            stamp, body = m.group(1), body[m.end():]
        glog = _GLOG.match(body)
        rank = int(glog.group(1)) if glog and glog.group(1) else None
        if glog:
            if glog.group(2) and stamp is None:
                stamp = f"{glog.group(2)} {glog.group(3)}"     # glog: MMDD, no year
            body = body[glog.end():]
        m = _NCCL.match(body)
        if m is None:
            if warn is not None and body.strip() and not _GLOG.match(body):
                # the message of the WARN line before went on over a line break
                facts.warns[warn[1]] = _warn(warn[0].where, warn[0].file, warn[0].file_line,
                                             warn[0].message + " " + body.strip())
                warn = None
                continue
            warn = None
            desync = _torch(body, Where(source, no, stamp=stamp), rank, facts, desync,
                            seen_timeouts)
            continue
        warn = None
        where = Where(source, no, m.group("host"), int(m.group("pid")), int(m.group("dev")),
                      stamp)
        msg = m.group("msg")
        if m.group("level") == "WARN":
            w = _warn(where, m.group("file") or "", int(m.group("fline") or 0), msg.strip())
            facts.warns.append(w)
            warn = (w, len(facts.warns) - 1)
        elif m.group("level") == "INFO":
            _info(where, msg, facts)
    return facts


def _info(where: Where, msg: str, facts: LogFacts) -> None:
    if (n := _NET_IB.search(msg)) is not None:
        devs = tuple((int(d), name, int(port), link)
                     for d, name, port, link in _IB_DEV.findall(n.group("devs")))
        facts.net.append(NetUse(where, devs, n.group("if"), n.group("ip")))
    elif (n := _NET_SOCKET.search(msg)) is not None:
        found = _SOCKET_DEV.findall(n.group("devs"))
        if found:
            facts.net.append(NetUse(where, tuple((int(d), name, 0, "Socket")
                                                 for d, name, _ in found),
                                    found[0][1], found[0][2]))
    elif (i := _INIT.search(msg)) is not None:
        facts.inits.append(CommInit(where, comm_hash(i.group(4)), int(i.group(1)),
                                    int(i.group(2)), int(i.group(3))))
    elif (p := _PROPAGATE.match(msg.strip())) is not None:
        key = (where.host or "", where.pid or -1)
        codes = facts.errors_by_process.setdefault(key, {})
        code = int(p.group(3))
        codes[code] = codes.get(code, 0) + 1


def _warn(where: Where, file: str, file_line: int, msg: str) -> NcclWarn:
    if "Got completion from peer" in msg:
        peer = _PEER.search(msg)
        st = _STATUS.search(msg)
        status = name = None
        if st:
            num = st.group(1) or st.group(3) or st.group(4)
            status = int(num) if num else None
            name = st.group(2) or (WC_STATUS[status] if status is not None
                                   and status < len(WC_STATUS) else None)
        vend = _VENDOR.search(msg)
        direction = _DIRECTION.search(msg)
        hca = _HCA.search(msg)
        return NcclWarn(where, file, file_line, msg, "ib_completion",
                        peer.group("addr") if peer else None,
                        int(peer.group("port")) if peer else None, status, name,
                        int(vend.group(1)) if vend else None,
                        direction.group(1) if direction else None,
                        hca.group(1) if hca else None)
    if (c := _CONNECT.search(msg)) is not None:
        return NcclWarn(where, file, file_line, msg, "socket_connect", c.group("addr"),
                        int(c.group("port")), status_name=c.group("why").strip())
    return NcclWarn(where, file, file_line, msg)


def _torch(body: str, where: Where, rank: int | None, facts: LogFacts, desync: dict | None,
           seen: set[tuple]) -> dict | None:
    """PyTorch's watchdog lines; returns the desync report being read, if any."""
    if desync is not None:
        if _DESYNC_HEAD.match(body):
            return desync
        if (m := _DESYNC_RANK.match(body)) is not None and not body.lstrip().startswith("-"):
            desync["culprits"].append((int(m.group(1)), m.group(2).strip()))
            return desync
        facts.desyncs.append(DesyncReport(**{**desync, "culprits": tuple(desync["culprits"])}))
        desync = None
    if (m := _TIMEOUT.search(body)) is not None:
        key = (rank, int(m.group(1)), int(m.group(2)), m.group(3))
        if key in seen:       # repeated by "watchdog thread terminated with exception"
            return desync
        seen.add(key)
        facts.timeouts.append(WatchdogTimeout(
            where, rank, int(m.group(1)), int(m.group(2)), op_name(m.group(3)),
            int(m.group(4)) if m.group(4) else None, int(m.group(5)) if m.group(5) else None,
            int(m.group(6)), int(m.group(7))))
    elif (m := _FAILURE.search(body) or _FAILURE_OLD.search(body)) is not None:
        facts.statuses.append(WatchdogStatus(
            where, rank, m.group(1), m.group(3), int(m.group(4)), int(m.group(5)),
            int(m.group(6)), int(m.group(7))))
    elif (m := _DESYNC.match(body)) is not None:
        return {"where": where, "rank": rank, "pg_rank": int(m.group(1)),
                "op": op_name(m.group(2)), "seq": int(m.group(3)), "culprits": []}
    return desync


def read_logs(paths: Iterable[str | Path], problems: Problems | None = None) -> LogFacts:
    """The facts of every log file (plain text; ``.gz`` decompressed)."""
    import gzip

    facts = LogFacts()
    for p in paths:
        path = Path(p)
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", errors="replace") as fh:
            before = len(facts)
            parse_logs(fh, str(path), facts, problems)
            if len(facts) == before and problems is not None:
                problems.add(str(path), None, "empty_log", "no NCCL or watchdog line c4 reads "
                             "(NCCL_DEBUG=INFO prints the NIC and communicator lines)")
    return facts
