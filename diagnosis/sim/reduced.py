"""Writes a simulation as the reduced trace of format version 2, the way the live edge
(collectors and node sidecar, ``c4.reduce``) would ship it: sampled op rows,
``progress`` per window, ``linkstat`` instead of ``conn``, and NIC ``port`` records.

The simulator knows each iteration's calls and transfers as soon as it has simulated it, ahead
of the release point of the rows (``diagnosis.sim.order``): it feeds the reducer every entry,
completion and transfer at once, so a call entered in one window and completed windows later
counts as entered in its first window, as the collectors' open rows make it on a live job.
Windows close when the release point passes their end: nothing earlier is still to come.
"""

from __future__ import annotations

import logging

import numpy as np

from c4.proto.codec import Columns
from c4.reduce import EdgeReducer, Reduced
from diagnosis.sim.model import Batch, Simulation
from diagnosis.sim.ports import PortEvent, PortStates
from diagnosis.sim.writer import TraceWriter

log = logging.getLogger(__name__)

_PROGRESS = '{"type":"progress","rank":%d,"pg":"%s","t_ns":%d,"entered":%d%s}\n'
_PROGRESS_P2P = ('{"type":"progress","rank":%d,"pg":"%s","op":"%s","peer":%d,"t_ns":%d,'
                 '"entered":%d%s}\n')
_LINKSTAT = ('{"type":"linkstat","src":%d,"dst":%d,"t_ns":%d,"window_ns":%d,"pg":"%s"%s,'
             '"transfers":%d,"bytes":%d,"busy_ns":%d,"max_ns":%d,"open":%d%s}\n')
_PORT = ('{"type":"port","host":"%s","nic":"%s","t_ns":%d,"state":"%s",'
         '"link_downed":%d}\n')


class SimEdge:
    """The edge of a simulated job (its collectors and node sidecars, ``c4.reduce``)
    reducing its telemetry at factor ``sample``: :meth:`observe` every simulated batch (each
    call's entry and completion, each transfer, and the port changes they reveal, ahead of
    their release); subclasses say where the reduced records go."""

    def __init__(self, sim: Simulation, sample: int, window_ns: int) -> None:
        self.sim = sim
        self.reducer = EdgeReducer(sample, window_ns)
        self.ports = PortStates(sim)
        self.ports_due: list[PortEvent] = []

    def observe(self, batch: Batch) -> None:
        """Every call and transfer of a freshly simulated iteration, ahead of its release."""
        sim = self.sim
        self.reducer.observe_calls(Columns(batch.ops, sim.strings))
        c = batch.conns
        if len(c["conn"]):
            idx = c["conn"]
            self.reducer.add_transfers(Columns(
                {"src": sim.conns.src[idx], "dst": sim.conns.dst[idx], "pg": c["pg"],
                 "bytes": c["bytes"], "t_start_ns": c["t_start_ns"], "t_end_ns": c["t_end_ns"],
                 "path": idx}, sim.strings))
        self.ports_due += self.ports.poll()

    def sampled(self, ops: dict[str, np.ndarray]) -> Columns:
        """The op rows of ``ops`` the edge ships: those of sampled calls."""
        return self.reducer.sample_ops(Columns(ops, self.sim.strings))

    def check_late(self) -> None:
        st = self.reducer.stats
        if st.late_progress or st.late_transfers:
            # every event is fed before the release point passes it: this is a bug
            log.warning("the edge reducer got %d progress events and %d transfers after their "
                        "window closed", st.late_progress, st.late_transfers)


class ReducedWriter(SimEdge):
    """The version 2 counterpart of :class:`TraceWriter`'s row writing: :meth:`header`,
    :meth:`observe` each batch as it is simulated, :meth:`release` rows in completion order
    with the time up to which nothing more is to come, then :meth:`end`."""

    def __init__(self, writer: TraceWriter, sim: Simulation, sample: int, window_ns: int) -> None:
        super().__init__(sim, sample, window_ns)
        self.writer = writer
        self.n_progress = self.n_linkstat = self.n_port = 0
        self._no_conns: dict[str, np.ndarray] = {"conn": np.empty(0, np.int64)}

    def header(self) -> None:
        self.writer.header(sample=self.reducer.sample)
        self._ports(self.ports.initial())

    def release(self, ops: dict[str, np.ndarray], upto_ns: int) -> None:
        """Op rows now shipped (sampled), then the port changes and windows up to
        ``upto_ns``."""
        if len(ops["rank"]):
            kept = self.sampled(ops)
            self.writer.rows(kept.columns, self._no_conns)
        self._ports([e for e in self.ports_due if e.t_ns <= upto_ns])
        self.ports_due = [e for e in self.ports_due if e.t_ns > upto_ns]
        self._windows(self.reducer.advance(upto_ns))

    def end(self) -> None:
        """The rest: port changes (a job stalled by a dead component stops here, so its port
        records come before the windows of the wait that follows), the windows up to the end
        of recording, and the ``end`` record."""
        self._ports(sorted(self.ports_due + self.ports.poll(final=True),
                           key=lambda e: (e.t_ns, e.nic)))
        self.ports_due = []
        self._windows(self.reducer.flush(self.sim.end_ns))
        self.writer.end()
        self.check_late()

    # ----- lines ------------------------------------------------------------------------------
    def _windows(self, red: Reduced) -> None:
        self._progress(red.progress)
        self._linkstat(red.linkstat)

    def _progress(self, p: Columns) -> None:
        n = len(p)
        if not n:
            return
        self.n_progress += n
        names = np.asarray(p.strings, dtype=object)
        pg = names[p["pg"]].tolist()
        op = np.where(p["op"] >= 0, names[np.maximum(p["op"], 0)], "").tolist()
        done = [f',"completed":{c}' if c >= 0 else "" for c in p["completed"].tolist()]
        lines = [_PROGRESS_P2P % (r, g, o, pe, t, e, d) if o else _PROGRESS % (r, g, t, e, d)
                 for r, g, o, pe, t, e, d in zip(p["rank"].tolist(), pg, op, p["peer"].tolist(),
                                                 p["t_ns"].tolist(), p["entered"].tolist(), done)]
        self.writer.out.write("".join(lines))

    def _linkstat(self, ls: Columns) -> None:
        n = len(ls)
        if not n:
            return
        self.n_linkstat += n
        names = np.asarray(ls.strings, dtype=object)
        pg = names[ls["pg"]].tolist()
        net = self.sim.conns
        paths = ([f',"path":{net.path_json[k]}' for k in ls["path"].tolist()]
                 if self.sim.cfg.paths else [""] * n)
        since = [f',"open_since_ns":{s}' if s >= 0 else "" for s in ls["open_since_ns"].tolist()]
        cols = (ls[k].tolist() for k in ("src", "dst", "t_ns", "window_ns"))
        counts = (ls[k].tolist() for k in ("transfers", "bytes", "busy_ns", "max_ns", "open"))
        lines = [_LINKSTAT % row for row in zip(*cols, pg, paths, *counts, since)]
        self.writer.out.write("".join(lines))

    def _ports(self, events: list[PortEvent]) -> None:
        self.n_port += len(events)
        self.writer.out.write("".join(
            _PORT % (e.host, e.nic, e.t_ns, "up" if e.up else "down", e.link_downed)
            for e in events))
