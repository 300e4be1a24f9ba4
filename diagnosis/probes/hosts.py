"""Turning the names an operator or the recovery controller gives (lab host ids, addresses)
into :class:`~diagnosis.probes.api.ProbeHost` records: where each probe rank runs and how."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from diagnosis.probes.api import ProbeError, ProbeHost


@dataclass(frozen=True)
class HostResolver:
    """Lab hosts (from the lab's state: namespace, fabric address and interface) first; then
    addresses: loopback ones run on this machine, others behind ``remote`` (``("ssh",)``:
    the address is appended). ``ranks`` is the number of ranks per host."""

    lab_hosts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    remote: tuple[str, ...] = ()
    ranks: int = 1

    @classmethod
    def for_lab(cls, lab_state: Mapping[str, Any] | None, **kw: Any) -> HostResolver:
        return cls(lab_hosts=dict((lab_state or {}).get("hosts") or {}), **kw)

    def __call__(self, name: str) -> ProbeHost:
        h = self.lab_hosts.get(name)
        if h is not None:
            return ProbeHost(name, h["addr"], ("ip", "netns", "exec", h["ns"]),
                             {"GLOO_SOCKET_IFNAME": h.get("ifname", "fab0")}, self.ranks)
        try:
            addr = ipaddress.ip_address(name)
        except ValueError:
            addr = None
        if addr is not None and addr.is_loopback:
            return ProbeHost(name, name, (), {}, self.ranks)
        if self.remote:
            return ProbeHost(name, name, (*self.remote, name), {}, self.ranks)
        known = f" (lab hosts: {', '.join(sorted(self.lab_hosts))})" if self.lab_hosts else ""
        raise ProbeError(f"{name!r} is neither a lab host{known} nor a loopback address: "
                         "pass a remote shell (--remote ssh) to probe other machines")

    def many(self, names: list[str]) -> list[ProbeHost]:
        return [self(n) for n in names]
