"""What every importer shares: the issues it reports, the error it raises, and a builder that
adds hosts, NICs, switches and cables to a node-link graph of shared specs section 1.

A cable is one physical connection; two nodes joined by several cables (a leaf with two cables
to the same spine) are one link of the topology whose ``gbps`` is the sum of its cables' and
whose ``cables`` says how many there are (no flow path can tell the cables of a bundle apart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from c4.errors import FormatError, locate

WARNING, INFO = "warning", "info"
#: the id of a host's NIC when the source names the host's attachment but not its NICs (Slurm,
#: AWS, Kubernetes labels): replaced by the host's real NICs when they are merged in
PLACEHOLDER_NIC = "nic"


class TopologyImportError(FormatError):
    """A source file that cannot be imported; the message names the file, the line and what to
    do about it."""


@dataclass(frozen=True)
class Issue:
    """Something an import or merge could not settle: a name that matches nothing, two sources
    that disagree, input that was skipped. ``warning`` needs a person; ``info`` says what was
    assumed."""

    level: str
    message: str
    source: str = ""
    line: int | None = None

    def __str__(self) -> str:
        return locate(self.message, self.source, self.line)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"level": self.level, "message": self.message}
        if self.source:
            out["source"] = self.source
        if self.line is not None:
            out["line"] = self.line
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Issue:
        return cls(str(obj.get("level", WARNING)), str(obj.get("message", "")),
                   str(obj.get("source", "")), obj.get("line"))


def read_text(path: str | Path) -> str:
    """A source file's text with CRLF/CR line ends made LF; errors name the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TopologyImportError(f"cannot read: {exc.strerror or exc}", source=str(path)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TopologyImportError(f"not UTF-8 text (byte {exc.start}): give the tool's text "
                                  "output", source=str(path)) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


_BAD_ID = re.compile(r"[~\s]+")


def clean_id(name: str) -> str:
    """A node id from a name: trimmed, '~' (the link id separator) and inner white space made
    '-'."""
    return _BAD_ID.sub("-", name.strip()).strip("-")


@dataclass
class Fabric:
    """A topology being imported: the node-link graph plus the issues met on the way.

    Node attributes beyond the format's (``kind``, ``host``, ``tier``): ``desc`` (a device's own
    description), ``guid``, ``ibdev``/``netdev`` (a NIC's names on its host), ``level`` (a
    switch's height above the hosts, 0 = leaf), ``placeholder`` (a NIC that stands for a host's
    unnamed attachment). Link attributes: ``gbps``, ``cables``, ``ports`` (node id -> the port
    numbers or names of the link's cables on that node).
    """

    source: str = ""
    graph: nx.Graph = field(default_factory=nx.Graph)
    issues: list[Issue] = field(default_factory=list)
    _partial_speed: bool = field(default=False, repr=False)

    # ----- issues ---------------------------------------------------------------------------
    def warn(self, message: str, line: int | None = None, source: str | None = None) -> None:
        self.issues.append(Issue(WARNING, message, self.source if source is None else source,
                                 line))

    def info(self, message: str, line: int | None = None, source: str | None = None) -> None:
        self.issues.append(Issue(INFO, message, self.source if source is None else source,
                                 line))

    # ----- nodes ----------------------------------------------------------------------------
    def add_host(self, host: str, **attrs: Any) -> str:
        g = self.graph
        if host in g and g.nodes[host].get("kind") != "host":
            raise TopologyImportError(f"{host!r} names a host and a {g.nodes[host]['kind']}: "
                                      "rename one of them", source=self.source)
        if host not in g:
            g.add_node(host, kind="host")
        _set_attrs(g.nodes[host], attrs)
        return host

    def add_nic(self, host: str, name: str, **attrs: Any) -> str:
        self.add_host(host)
        nic = f"{host}/{name}"
        g = self.graph
        if nic not in g:
            g.add_node(nic, kind="nic", host=host)
            g.add_edge(host, nic)
        _set_attrs(g.nodes[nic], attrs)
        return nic

    def add_placeholder_nic(self, host: str) -> str:
        """The one NIC of a host whose source names its attachment, not its NICs."""
        return self.add_nic(host, PLACEHOLDER_NIC, placeholder=True)

    def add_gpu(self, host: str, index: int, **attrs: Any) -> str:
        self.add_host(host)
        gpu = f"{host}/gpu{index}"
        if gpu not in self.graph:
            self.graph.add_node(gpu, kind="gpu", host=host)
            self.graph.add_edge(host, gpu)
        _set_attrs(self.graph.nodes[gpu], attrs)
        return gpu

    def add_switch(self, switch: str, **attrs: Any) -> str:
        g = self.graph
        if switch in g and g.nodes[switch].get("kind") != "switch":
            raise TopologyImportError(f"{switch!r} names a switch and a "
                                      f"{g.nodes[switch]['kind']}: rename one of them",
                                      source=self.source)
        if switch not in g:
            g.add_node(switch, kind="switch")
        _set_attrs(g.nodes[switch], attrs)
        return switch

    # ----- links ----------------------------------------------------------------------------
    def add_cable(self, a: str, b: str, gbps: float | None = None,
                  ports: tuple[Any, Any] | None = None) -> None:
        """One more cable between ``a`` and ``b``: a new link, or one more cable of the link
        already there (its ``gbps`` grows by the cable's; unknown if any cable's is)."""
        g = self.graph
        if g.has_edge(a, b):
            d = g.edges[a, b]
            d["cables"] = d.get("cables", 1) + 1
            if gbps is None or d.get("gbps") is None:
                if d.pop("gbps", None) is not None or gbps is not None:
                    self._partial_speed = True
            else:
                d["gbps"] = d["gbps"] + gbps
        else:
            g.add_edge(a, b)
            d = g.edges[a, b]
            if gbps is not None:
                d["gbps"] = gbps
        if ports is not None:
            pmap = d.setdefault("ports", {})
            for node, port in zip((a, b), ports):
                if port is not None:
                    pmap.setdefault(node, []).append(port)

    def link(self, a: str, b: str, **attrs: Any) -> None:
        """A link that is not a cable count (GPU-NIC PCIe, a switch tree edge)."""
        self.graph.add_edge(a, b)
        _set_attrs(self.graph.edges[a, b], attrs)

    # ----- result ---------------------------------------------------------------------------
    def finish(self) -> Fabric:
        """Report links whose capacity had to be left out."""
        if self._partial_speed:
            self.warn("a link bundles cables of known and unknown speed: its capacity is left "
                      "out")
        return self


def _set_attrs(target: dict[str, Any], attrs: dict[str, Any]) -> None:
    for k, v in attrs.items():
        if v is not None:
            target[k] = v


def few(items: list[str], n: int = 4) -> str:
    """Up to ``n`` of the items, sorted, and how many more there are (for messages)."""
    shown = ", ".join(sorted(items)[:n])
    return shown + (f", … ({len(items) - n} more)" if len(items) > n else "")


def counts(graph: nx.Graph) -> dict[str, Any]:
    """Nodes by kind, switches by tier, links (not host membership) and cables."""
    kinds: dict[str, int] = {"host": 0, "gpu": 0, "nic": 0, "switch": 0}
    tiers: dict[str, int] = {}
    for _, d in graph.nodes(data=True):
        kinds[d.get("kind", "?")] = kinds.get(d.get("kind", "?"), 0) + 1
        if d.get("kind") == "switch":
            t = d.get("tier") or "-"
            tiers[t] = tiers.get(t, 0) + 1
    links = cables = 0
    for u, v, d in graph.edges(data=True):
        if "host" in (graph.nodes[u].get("kind"), graph.nodes[v].get("kind")):
            continue
        links += 1
        cables += int(d.get("cables", 1))
    return {"hosts": kinds["host"], "gpus": kinds["gpu"], "nics": kinds["nic"],
            "switches": kinds["switch"], "tiers": dict(sorted(tiers.items())), "links": links,
            "cables": cables}
