"""One rank's collector: the recorder (hooks), the buffer and the shipper, wired together."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from dataclasses import dataclass

from c4.proto import c4_pb2
from collectors.buffer import RecordBuffer
from collectors.config import CollectorConfig
from collectors.devices import cuda_device
from collectors.hook import Recorder
from collectors.shipper import Shipper
from collectors.sigterm import TermWatch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectorCounters:
    """Cumulative counters of this process's collector (also shipped in stats frames)."""

    recorded: int
    dropped: int
    shipped: int
    pending: int
    connected: bool


class Collector:
    """Created by ``collectors.install()``; one per process."""

    def __init__(self, config: CollectorConfig) -> None:
        from collectors.cuda_timing import make_cuda_timer

        self.config = config
        self.buffer = RecordBuffer(config.buffer_rows)
        self.recorder = Recorder(self.buffer, self._attach, make_cuda_timer,
                                 async_timing=config.async_timing)
        self.shipper: Shipper | None = None
        self.term_watch: TermWatch | None = None
        self._lock = threading.Lock()
        self._installed = False

    def install(self) -> None:
        self.recorder.patch()
        self._installed = True
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self._after_fork)

    def uninstall(self) -> None:
        """Restore torch.distributed and ship what is left (bounded by ``exit_flush_s``)."""
        if self._installed:
            from collectors.ddp import unpatch_ddp

            self.recorder.unpatch()
            unpatch_ddp()
            self._installed = False
        watch, self.term_watch = self.term_watch, None
        if watch is not None:
            watch.disarm()
        self.close()
        atexit.unregister(self.close)

    def _attach(self) -> None:
        """Start shipping once torch.distributed knows this rank (first call or init)."""
        if self.shipper is not None:
            return
        with self._lock:
            if self.shipper is not None:
                return
            if self.config.ddp_hook and self._installed:
                from collectors.ddp import patch_ddp

                patch_ddp()
            info = self._rank_info()
            done = self.recorder.done
            shipper = Shipper(self.config, self.buffer, info, before_cycle=self._before_cycle,
                              poll=done.poll, outstanding=done.outstanding)
            shipper.start()
            self.shipper = shipper
            self._arm_term_watch()
            log.debug("c4 collector: rank %d of job %s ships to %s", info.rank, info.job,
                      self.config.socket_path)

    def _arm_term_watch(self) -> None:
        # Armed only here, once the process is a rank that ships: a launcher that imports
        # torch.distributed (torchrun's agent) keeps its own SIGTERM behaviour untouched.
        if self.config.term_flush_s <= 0 or self.term_watch is not None or not self._installed:
            return
        watch = TermWatch(self._on_sigterm, self.config.term_flush_s)
        if watch.arm():
            self.term_watch = watch

    def _on_sigterm(self, final: bool) -> None:
        """Ship every row so far and every pending call as open, within ``term_flush_s``."""
        shipper = self.shipper
        if shipper is None:
            return
        if final:  # the process dies next: no more cycles, as at exit
            self.shipper = None
            shipper.stop(self.config.term_flush_s)
        else:  # the program's own handler decides what happens next
            shipper.flush(self.config.term_flush_s, urgent=True)

    def _before_cycle(self) -> None:
        self.recorder.done.adapt()  # C4_ASYNC_TIMING=auto: callbacks or polling, by call rate
        # The timer appears with the first NCCL group, after the shipper has started.
        timer = self.recorder.cuda_timer
        if timer is not None:
            timer.poll()

    def _rank_info(self) -> c4_pb2.RankInfo:
        import torch.distributed as dist

        cfg = self.config
        local = os.environ.get("LOCAL_RANK", "")
        local_rank = int(local) if local.lstrip("-").isdigit() else -1
        return c4_pb2.RankInfo(
            job=cfg.job, attempt=cfg.attempt, rank=dist.get_rank(),
            world_size=dist.get_world_size(), host=cfg.host, local_rank=local_rank,
            pid=os.getpid(), gpu=cfg.gpu, nic=cfg.nic, backend=str(dist.get_backend()),
            t_ns=time.time_ns(), cuda_device=cuda_device(local_rank))

    def flush(self, timeout: float = 2.0) -> bool:
        """Ship everything recorded so far now; False if the sidecar did not take it in time."""
        if self.shipper is None:
            return not self.buffer.rows
        return self.shipper.flush(timeout) and not self.buffer.rows

    def counters(self) -> CollectorCounters:
        sh = self.shipper
        return CollectorCounters(
            recorded=self.buffer.recorded,
            dropped=sh.dropped() if sh else self.buffer.dropped_full,
            shipped=sh.shipped if sh else 0,
            pending=len(self.buffer.pending),
            connected=bool(sh and sh._sock is not None))

    def close(self) -> None:
        shipper, self.shipper = self.shipper, None
        if shipper is not None:
            shipper.stop(self.config.exit_flush_s + 0.5)
            if shipper.dropped():
                log.warning("c4 collector: %d of %d recorded calls were dropped (sidecar at %s "
                            "absent or slow)", shipper.dropped(), self.buffer.recorded,
                            self.config.socket_path)

    def _after_fork(self) -> None:
        # The shipper thread does not exist in a forked child (e.g. a DataLoader worker): start
        # afresh there if the child ever makes a call of its own.
        if self._installed:
            self.shipper = None
            self.buffer.clear()
            self._lock = threading.Lock()
            watch, self.term_watch = self.term_watch, None
            if watch is not None:
                watch.after_fork_in_child()
