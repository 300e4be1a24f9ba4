"""NCCL's own telemetry on this node, read by the sidecar and shipped as the ranks' records are.

With ``c4 sidecar --nccl-job JOB --nccl-inspector DIR [--nccl-ras [ADDR]]`` the sidecar follows
the Inspector's dump directory (every process's file as it grows, rotated and truncated ones
included) and polls ``ncclras`` on the node, and sends what they yield to the daemon as rank,
group and op requests (:class:`diagnosis.nccl.live.NcclNode` does the reading and reconciling;
this module runs it and hands its records to the outbox, which logs them first like every
other record).

One source per process: the processes whose c4 torch hook already delivers records for the
same job (the intake knows their pids) are skipped, so a job may run both without duplicates.

Limits: a process is shipped once its global rank is known (``RANK`` in its environment, which
torchrun and most launchers set); communicators whose members are all on this node are shipped
as groups, the others as parts (this node's members; the daemon joins every node's parts into
the group), repeated every ``parts_every_s`` for a daemon that restarted before the group was
whole. RAS progress (which call a silent rank is inside) goes out as
progress records marked ``completed_only``, from which the daemon's engine takes the calls the
ranks are inside, as ``c4 analyze --ncclras`` does offline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from c4.proto import c4_pb2
from c4.settings import positive, setting, validate
from collectors.sidecar.errors import SidecarConfigError

log = logging.getLogger(__name__)

__all__ = ["NcclSource", "NcclSourceConfig"]

_BODY = {c4_pb2.RankInfo: "rank", c4_pb2.GroupInfo: "group", c4_pb2.OpBatch: "ops",
         c4_pb2.ProgressBatch: "progress"}


@dataclass(frozen=True)
class NcclSourceConfig:
    """What to read: the job the records belong to, the Inspector's dump directory (None: not
    followed), RAS's address (None: not polled; "": ``NCCL_RAS_ADDR`` or localhost:28028)."""

    job: str = setting("", flag="--nccl-job", env="C4_NCCL_JOB",
                       help="The job whose NCCL telemetry this node reads (with "
                            "--nccl-inspector and/or --nccl-ras).")
    inspector_dir: Path | None = setting(
        None, flag="--nccl-inspector", env="C4_NCCL_INSPECTOR",
        help="Follow this NCCL Inspector dump directory (NCCL_INSPECTOR_DUMP_DIR of the job's "
             "processes) and ship its calls; processes whose c4 hook reports already are "
             "skipped.")
    ras: str | None = setting(None, flag="--nccl-ras", env="C4_NCCL_RAS", metavar="ADDR",
                              help="Poll NCCL RAS at ADDR (host:port; \"\": NCCL_RAS_ADDR or "
                                   "localhost:28028) and ship the ranks it finds.")
    attempt: int = 0
    interval_s: float = setting(1.0, flag="--nccl-interval", env="C4_NCCL_INTERVAL",
                                check=positive,
                                help="Seconds between reads of the Inspector files.")
    ras_interval_s: float = setting(10.0, flag="--nccl-ras-interval",
                                    env="C4_NCCL_RAS_INTERVAL", check=positive,
                                    help="Seconds between RAS polls.")

    parts_every_s: float = setting(60.0, flag="--nccl-parts-every", env="C4_NCCL_PARTS_EVERY",
                                   check=positive,
                                   help="Seconds between repeats of this node's part of each "
                                        "communicator spanning nodes (a daemon that restarted "
                                        "before every node's part was in learns it again).")

    def __post_init__(self) -> None:
        validate(self, SidecarConfigError)
        if not self.job:
            raise SidecarConfigError("--nccl-job is needed with --nccl-inspector/--nccl-ras: "
                                     "the job the NCCL records belong to")
        if self.inspector_dir is None and self.ras is None:
            raise SidecarConfigError("give --nccl-inspector DIR, --nccl-ras, or both")


class NcclSource:
    """Runs :class:`~diagnosis.nccl.live.NcclNode` and puts what each step yields into the
    sidecar's outbox (``put``: ``Outbox.put``, called with ``rank=``, ``group=``, ``ops=`` or
    ``progress=``)."""

    def __init__(self, config: NcclSourceConfig, host: str, put: Callable[..., None],
                 hooked_pids: Callable[[], set[int]] = set) -> None:
        from diagnosis.nccl.live import NcclNode
        from diagnosis.nccl.ras_client import RasClient, RasPoller, ras_address

        self.config = config
        self.host = host
        self._put = put
        self._hooked = hooked_pids
        ras = None
        if config.ras is not None:
            ras = RasPoller(RasClient(ras_address(config.ras or None)),
                            interval_s=config.ras_interval_s)
        self.node = NcclNode(inspector_dir=config.inspector_dir, ras=ras,
                             skip=lambda _host, pid: pid in self._hooked_now)
        self._hooked_now: set[int] = set()
        self._parts_at = time.monotonic()
        self._learnt: list[c4_pb2.GroupInfo] = []     # from the daemon, for the next step
        self._learnt_lock = threading.Lock()
        self.records = 0         # op rows shipped
        self.cpu_s = 0.0         # this thread's CPU time in steps (the cost of reading)

    def learn(self, group: c4_pb2.GroupInfo) -> None:
        """A communicator the daemon joined from every node's parts (called on the outbox's
        stream thread; taken in at the next step)."""
        if group.job == self.config.job and group.attempt == self.config.attempt:
            with self._learnt_lock:
                self._learnt.append(group)

    def step(self) -> int:
        """Read what is new and queue it; returns the op rows queued."""
        t0 = time.thread_time()
        with self._learnt_lock:
            learnt, self._learnt = self._learnt, []
        for g in learnt:
            self.node.learn_group(g.pg, tuple(g.ranks))
            log.info("job %s: communicator %s has %d ranks across nodes (joined by the daemon)",
                     g.job, g.pg, len(g.ranks))
        self._hooked_now = self._hooked()
        recs = self.node.step()
        msgs = recs.messages(self.config.job, self.config.attempt)
        if time.monotonic() - self._parts_at >= self.config.parts_every_s:
            self._parts_at = time.monotonic()
            msgs = self.node.parts().messages(self.config.job, self.config.attempt) + msgs
        rows = 0
        for msg in msgs:
            if isinstance(msg, c4_pb2.RankInfo):
                msg.host = self.host      # the topology's name for this node, as hooks use
            if isinstance(msg, c4_pb2.OpBatch):
                rows += msg.count
            self._put(**{_BODY[type(msg)]: msg})
        self.records += rows
        self.cpu_s += time.thread_time() - t0
        return rows

    def run(self, stop: threading.Event) -> None:
        """Step every ``interval_s`` until ``stop``; a failed step is logged, not fatal."""
        while not stop.wait(self.config.interval_s):
            try:
                self.step()
            except Exception:
                log.exception("reading NCCL's telemetry for job %s failed this round",
                              self.config.job)
