"""NIC port states of a simulated job, as the node sidecar samples them (trace ``port``
records, format version 2).

Every NIC of the job's hosts reports once at the start, ``up``. A dead component that ends at
a NIC takes the NIC ports it touches down at the moment it dies (the fault's ``event_ns`` in
truth.json; the moment it died when no transfer revealed it): a dead NIC-switch cable its
port, a dead NIC all of its ports, a dead switch the ports cabled to it (a leaf; a spine or
core has no NIC on it). Switch-to-switch links are invisible to hosts. A NIC's ``state`` is
``down`` when all its ports are; ``link_downed`` counts the port-down events, as the kernel's
counter does, so a dual-port NIC that lost one port says so while it stays ``up``. Times are
on the host's clock (its offset included), like its ranks' records.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.sim.model import Simulation


@dataclass(frozen=True)
class PortEvent:
    t_ns: int
    host: str
    nic: str
    up: bool
    link_downed: int


class PortStates:
    """Port records of one simulation: :meth:`initial`, then :meth:`poll` after each
    iteration (and with ``final`` once it is over) for the changes now known."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        topo = sim.topo
        skew_of_host = {sim.lay.hosts[h]: int(sim.skew[r])
                        for r, h in enumerate(sim.lay.host_of.tolist())}
        self.nics: dict[str, tuple[str, list[str], int]] = {}   # nic -> host, cables, skew
        for host in sim.lay.hosts:
            for nic in topo.nics(host):
                cables = [lk for lk in topo.links_of(nic)
                          if topo.kind(_other(lk, nic)) == "switch"]
                self.nics[nic] = (host, cables, skew_of_host[host])
        self.down: dict[str, set[str]] = {nic: set() for nic in self.nics}
        self.downed: dict[str, int] = dict.fromkeys(self.nics, 0)
        self._struck: set[int] = set()
        self._healed: set[int] = set()

    def initial(self) -> list[PortEvent]:
        t0 = self.sim.cfg.t0_ns
        return [PortEvent(t0 + skew, host, nic, True, 0)
                for nic, (host, _, skew) in self.nics.items()]

    def poll(self, final: bool = False) -> list[PortEvent]:
        """Port changes that became known: a dead fault once its moment is known, its end
        (the iteration it stops at has begun)."""
        sim, out = self.sim, []
        for n, f in enumerate(sim.faults):
            if not f.kind.startswith("dead_"):
                continue
            if n not in self._struck:
                t = sim.events.get(("fault", n))
                if t is None and final:
                    t = sim.death.get(n)
                if t is None:
                    continue
                self._struck.add(n)
                out += self._change(self._ports(f.component["id"]), sim.cfg.t0_ns + int(t),
                                    down=True)
            stop = f.spec.end
            if (n not in self._healed and stop is not None
                    and stop < len(sim.iteration_start)):
                self._healed.add(n)
                out += self._change(self._ports(f.component["id"]),
                                    sim.iteration_start[stop], down=False)
        return sorted(out, key=lambda e: (e.t_ns, e.nic))

    def _ports(self, component: str) -> list[tuple[str, str]]:
        """(nic, cable) of every NIC port the component's death takes down."""
        if component in self.nics:                        # a NIC: all its ports
            return [(component, c) for c in self.nics[component][1]]
        if "~" in component:                              # a link: a cable, if it is one
            return [(e, component) for e in component.split("~") if e in self.nics]
        return [(nic, lk) for lk in self.sim.topo.links_of(component)    # a switch
                for nic in (_other(lk, component),) if nic in self.nics]

    def _change(self, ports: list[tuple[str, str]], t_ns: int, down: bool) -> list[PortEvent]:
        changed: dict[str, None] = {}
        for nic, cable in ports:
            now = self.down[nic]
            if down and cable not in now:
                now.add(cable)
                self.downed[nic] += 1
                changed[nic] = None
            elif not down and cable in now:
                now.discard(cable)
                changed[nic] = None
        out = []
        for nic in changed:
            host, cables, skew = self.nics[nic]
            out.append(PortEvent(t_ns + skew, host, nic, len(self.down[nic]) < len(cables),
                                 self.downed[nic]))
        return out


def _other(link: str, node: str) -> str:
    a, b = link.split("~")
    return b if a == node else a
