"""Parse ``ibnetdiscover`` output, both the default topology file and the ``-p`` ports report,
into nodes and cables (FORMATS.md section 1 of the fixtures). Naming hosts and switches and
building the graph is :mod:`c4.topology.importers.ibnetdiscover`'s job."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from c4.topology.importers.common import TopologyImportError

#: data rate per lane in Gbit/s (the nominal figure: 4x NDR = 400)
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0,
             "HDR": 50.0, "NDR": 100.0, "XDR": 200.0}
WIDTHS = {"1x": 1, "2x": 2, "4x": 4, "8x": 8, "12x": 12}


def cable_gbps(width: str, speed: str) -> float | None:
    """A link's rate from its width and speed (``4x`` and ``NDR``: 400); None when either is
    unknown (``??``, ``???``)."""
    lanes, rate = WIDTHS.get(width.lower()), LANE_GBPS.get(speed.upper())
    return None if lanes is None or rate is None else lanes * rate


@dataclass
class IbNode:
    """A switch, CA or router. ``key`` is how cables name it: the ``S-``/``H-``/``R-`` name of
    the topology file, or the GUID of the ports report."""

    key: str
    type: str                 # "switch", "ca", "router"
    guid: str                 # 16 hex digits
    desc: str = ""
    ports: int = 0
    line: int | None = None   # where its record starts (None: only seen as a peer)


@dataclass
class IbCable:
    a: str
    a_port: int
    b: str
    b_port: int
    width: str
    speed: str
    line: int

    @property
    def gbps(self) -> float | None:
        return cable_gbps(self.width, self.speed)

    def ends(self) -> frozenset[tuple[str, int]]:
        return frozenset(((self.a, self.a_port), (self.b, self.b_port)))


@dataclass
class IbDump:
    """What a dump says: its nodes, its cables (each once, though both ends list it), and the
    CAs whose record lists no connected port."""

    source: str
    nodes: dict[str, IbNode] = field(default_factory=dict)
    cables: list[IbCable] = field(default_factory=list)
    unconnected: list[IbNode] = field(default_factory=list)
    disagreements: list[tuple[IbCable, IbCable]] = field(default_factory=list)
    _seen: dict[frozenset[tuple[str, int]], IbCable] = field(default_factory=dict, repr=False)

    def node(self, key: str, type_: str, desc: str = "") -> IbNode:
        n = self.nodes.get(key)
        if n is None:
            n = self.nodes[key] = IbNode(key, type_, _guid_of(key), desc)
        elif desc and not n.desc:
            n.desc = desc
        return n

    def add_cable(self, cable: IbCable) -> None:
        ends = cable.ends()
        seen = self._seen.get(ends)
        if seen is None:
            self._seen[ends] = cable
            self.cables.append(cable)
        elif (seen.width, seen.speed) != (cable.width, cable.speed):
            self.disagreements.append((seen, cable))


_TYPES = {"Switch": "switch", "Ca": "ca", "Rt": "router", "SW": "switch", "CA": "ca",
          "RT": "router"}


def _guid_of(key: str) -> str:
    return key[2:] if key[:2] in ("S-", "H-", "R-") else key


def is_ports_report(text: str) -> bool:
    """Whether the text is ``ibnetdiscover -p`` output (one port per line)."""
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            return bool(_P_HEAD.match(line))
    return False


def parse(text: str, source: str) -> IbDump:
    """Either format, told apart by the first line that is not a comment."""
    return parse_ports(text, source) if is_ports_report(text) else parse_topology(text, source)


# ----- the default topology file ----------------------------------------------------------
_NAME = r'"([SHR]-[0-9a-fA-F]+)"'
_NODE = re.compile(r"^(Switch|Ca|Rt)\s+(\d+)\s+" + _NAME + r'\s*(?:#\s*"(.*)"(.*))?$')
_LINK = r'\s*#\s*(?:lid\s+\d+\s+lmc\s+\d+\s+)?"(.*)"\s+lid\s+\d+\s+([0-9?]+x)([A-Za-z0-9?]+)'
_SW_PORT = re.compile(r"^\[(\d+)\](?:\[ext \d+\])?\s*" + _NAME + r"\[(\d+)\](?:\[ext \d+\])?"
                      r"(?:\(([0-9a-fA-F]+)\))?" + _LINK)
_CA_PORT = re.compile(r"^\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s*" + _NAME + r"\[(\d+)\]"
                      r"(?:\[ext \d+\])?" + _LINK)
_KEYVAL = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|rtguid)=")
_HEADING = re.compile(r"^(Chassis\s+\S+.*|Non-Chassis Nodes)\s*$")


def parse_topology(text: str, source: str) -> IbDump:
    dump = IbDump(source)
    cur: IbNode | None = None
    cur_ports = 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            if cur is not None and cur.type == "ca" and cur_ports == 0:
                dump.unconnected.append(cur)
            cur = None
            continue
        if line.startswith("#") or _KEYVAL.match(line) or _HEADING.match(line):
            continue
        m = _NODE.match(line)
        if m:
            if cur is not None and cur.type == "ca" and cur_ports == 0:
                dump.unconnected.append(cur)
            kind, nports, key, desc = m.group(1), int(m.group(2)), m.group(3), m.group(4)
            cur = dump.node(key, _TYPES[kind], desc or "")
            if desc:
                cur.desc = desc
            cur.ports, cur.line, cur_ports = nports, no, 0
            continue
        if line.startswith("["):
            if cur is None:
                raise TopologyImportError(
                    f"a port line outside a node record: {_show(line)}; each record starts "
                    "with a 'Switch', 'Ca' or 'Rt' line (is the file cut?)", source=source,
                    line=no)
            cable = _port_line(line, cur, dump, no, source)
            cur_ports += 1
            dump.add_cable(cable)
            continue
        raise TopologyImportError(
            f"not an ibnetdiscover line: {_show(line)}; expected a 'Switch'/'Ca' record, a "
            "'[port]' line or a '#' comment (give the plain output of ibnetdiscover or "
            "ibnetdiscover -p)", source=source, line=no)
    if cur is not None and cur.type == "ca" and cur_ports == 0:
        dump.unconnected.append(cur)
    return dump


def _port_line(line: str, cur: IbNode, dump: IbDump, no: int, source: str) -> IbCable:
    pat = _SW_PORT if cur.type == "switch" else _CA_PORT
    m = pat.match(line)
    if not m:
        raise TopologyImportError(
            f"cannot read this {cur.type} port line: {_show(line)}; expected "
            + ('[port] "S-<guid>"[peer port] # "<desc>" lid N <width><speed>'
               if cur.type == "switch" else
               '[port](<port guid>) "S-<guid>"[peer port] # lid N lmc M "<desc>" lid N '
               '<width><speed>'), source=source, line=no)
    if cur.type == "switch":
        port, peer, peer_port, desc = int(m.group(1)), m.group(2), int(m.group(3)), m.group(5)
        width, speed = m.group(6), m.group(7)
    else:
        port, peer, peer_port, desc = int(m.group(1)), m.group(3), int(m.group(4)), m.group(5)
        width, speed = m.group(6), m.group(7)
    dump.node(peer, {"S": "switch", "H": "ca", "R": "router"}[peer[0]], desc)
    return IbCable(cur.key, port, peer, peer_port, width, speed, no)


# ----- the ports report (-p) --------------------------------------------------------------
_P_HEAD = re.compile(r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})\s+([0-9?]+x)\s+"
                     r"([A-Za-z0-9?]+)(.*)$")
_P_PEER = re.compile(r"^\s*-\s+(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})\s+"
                     r"\(\s*'(.*?)'\s+-\s+'(.*)'\s*\)\s*$")


def parse_ports(text: str, source: str) -> IbDump:
    dump = IbDump(source)
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _P_HEAD.match(line)
        if not m:
            raise TopologyImportError(
                f"not an ibnetdiscover -p line: {_show(line)}; expected '<CA|SW|RT> <lid> "
                "<port> 0x<guid> <width> <speed> ...'", source=source, line=no)
        type_, port, guid = _TYPES[m.group(1)], int(m.group(3)), m.group(4).lower().zfill(16)
        width, speed, rest = m.group(5), m.group(6), m.group(7)
        peer = _P_PEER.match(rest)
        if peer is None:
            # no peer: 36 spaces and the node's own description, quoted or (some versions) not
            desc = rest.strip()
            if len(desc) >= 2 and desc[0] == desc[-1] == "'":
                desc = desc[1:-1]
            elif "'" in desc or " - " in desc:
                raise TopologyImportError(
                    f"cannot read the peer of this port: {_show(line)}; expected "
                    "\"- <CA|SW> <lid> <port> 0x<guid> ( '<desc>' - '<peer desc>' )\"",
                    source=source, line=no)
            node = dump.node(guid, type_, desc.strip())
            node.line = node.line or no
            continue
        ptype, pport = _TYPES[peer.group(1)], int(peer.group(3))
        pguid = peer.group(4).lower().zfill(16)
        node = dump.node(guid, type_, peer.group(5).strip())
        node.line = node.line or no
        dump.node(pguid, ptype, peer.group(6).strip())
        dump.add_cable(IbCable(guid, port, pguid, pport, width, speed, no))
    return dump


def _show(line: str, n: int = 80) -> str:
    return repr(line if len(line) <= n else line[:n] + "…")
