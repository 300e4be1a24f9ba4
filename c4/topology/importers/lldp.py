"""``lldpctl -f json`` (or ``-f json0``): which switch, and which port of it, each of a host's
interfaces is cabled to.

lldpd's ``json`` collapses its tree (FORMATS.md section 3): ``interface`` is an object when there
is one interface and a list of one-key objects when there are several; ``chassis`` is keyed by
the switch's system name; one-element lists and ``{"value": ...}`` objects are unwrapped.
``json0`` never collapses. Both are read here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from c4.topology.importers.common import TopologyImportError, read_text


@dataclass(frozen=True)
class Neighbor:
    """The switch port one local interface is cabled to."""

    iface: str
    switch: str | None            # the neighbor's system name
    chassis_id: str | None        # usually its MAC
    port: str | None              # the switch's port (Ethernet3/1)
    port_descr: str | None = None
    switch_descr: str | None = None
    via: str | None = None        # LLDP, CDPv2, ...
    bridge: bool | None = None    # the neighbor says it is a bridge

    @property
    def switch_id(self) -> str | None:
        return self.switch or self.chassis_id


def read_neighbors(path: str | Path) -> list[Neighbor]:
    return parse(read_text(path), str(path))


def parse(text: str, source: str) -> list[Neighbor]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyImportError(f"not JSON: {exc.msg} (give 'lldpctl -f json' output)",
                                  source=source, line=exc.lineno) from None
    if not isinstance(doc, dict) or "lldp" not in doc:
        raise TopologyImportError("no 'lldp' object: not lldpctl -f json output",
                                  source=source)
    lldp = _one(doc["lldp"])
    if not isinstance(lldp, dict):
        raise TopologyImportError("'lldp' must be an object", source=source, field="lldp")
    return [_neighbor(name, body, source) for name, body in _interfaces(lldp.get("interface"))]


def _interfaces(node: Any) -> list[tuple[str, dict[str, Any]]]:
    """(interface name, body) pairs from either json layout."""
    if node is None:
        return []
    items = node if isinstance(node, list) else [node]
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if "name" in item and isinstance(item.get("name"), str):     # json0
            out.append((item["name"], item))
        else:                                                        # json: {"eth0": {...}}
            out.extend((k, v) for k, v in item.items() if isinstance(v, dict))
    return out


def _neighbor(iface: str, body: dict[str, Any], source: str) -> Neighbor:
    chassis = _one(body.get("chassis")) or {}
    name: str | None = None
    if isinstance(chassis, dict) and "id" not in chassis and "name" not in chassis \
            and len(chassis) == 1:
        name, chassis = next(iter(chassis.items()))     # json: keyed by system name
    elif isinstance(chassis, dict):
        name = _value(chassis.get("name"))
    if not isinstance(chassis, dict):
        raise TopologyImportError(f"interface {iface}: 'chassis' must be an object",
                                  source=source, field=f"interface.{iface}.chassis")
    cid = _one(chassis.get("id"))
    port = _one(body.get("port")) or {}
    pid = _one(port.get("id")) if isinstance(port, dict) else None
    caps = _one(chassis.get("capability"))
    caps = caps if isinstance(caps, list) else [caps] if isinstance(caps, dict) else []
    bridge = next((bool(_value(c.get("enabled")) in (True, "on", "true"))
                   for c in caps if isinstance(c, dict) and _value(c.get("type")) == "Bridge"),
                  None)
    return Neighbor(iface, name, _value(cid.get("value")) if isinstance(cid, dict) else None,
                    _value(pid.get("value")) if isinstance(pid, dict) else _value(pid),
                    _value(port.get("descr")) if isinstance(port, dict) else None,
                    _value(chassis.get("descr")), _value(body.get("via")), bridge)


def _one(x: Any) -> Any:
    while isinstance(x, list) and len(x) == 1:
        x = x[0]
    return x


def _value(x: Any) -> Any:
    x = _one(x)
    if isinstance(x, dict) and "value" in x:
        return _one(x["value"])
    return x if isinstance(x, (str, bool, int)) or x is None else None
