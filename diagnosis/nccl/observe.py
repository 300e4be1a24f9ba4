"""Tell the :class:`~diagnosis.nccl.job.JobModel` what each source says about the job's
processes and communicators (who holds which rank of which communicator, on which GPU, with
which NICs and address)."""

from __future__ import annotations

from collections.abc import Iterable

from diagnosis.nccl.job import JobModel
from diagnosis.nccl.logs import LogFacts
from diagnosis.nccl.ras import RasSnapshot
from diagnosis.nccl.records import NcclOps

__all__ = ["observe_logs", "observe_ops", "observe_ras"]


def observe_ops(model: JobModel, ops: NcclOps) -> None:
    """The (process, communicator) pairs of an operation batch."""
    if not len(ops):
        return
    pairs = set(zip(ops.proc.tolist(), ops.comm.tolist()))
    for p, c in pairs:
        host, pid = ops.procs[p]
        k = ops.comms[c]
        model.see_member(k.hash, k.rank, k.nranks, host, pid, nnodes=k.nnodes, name=k.name)


def observe_ras(model: JobModel, snaps: Iterable[RasSnapshot]) -> None:
    """Members, GPUs and the missing ranks of RAS reports (JSON: every rank; text: the ranks
    its outlier lines name)."""
    for s in snaps:
        for c in s.comms:
            for r in c.ranks:
                model.see_member(c.hash, r.rank, c.size, r.host, r.pid, cuda_dev=r.cuda_dev)
            for m in c.missing:
                if m.pid >= 0 and m.host != "unknown":
                    model.see_member(c.hash, m.rank, c.size, m.host, m.pid, cuda_dev=m.cuda_dev)
        sizes = {(g.group): g.ranks_per_comm for g in s.groups}
        for e in s.entries:
            for member in e.members:
                if member.pid is not None and member.node is not None:
                    model.see_member(e.hash, member.rank, sizes.get(e.group, 0), member.node,
                                     member.pid, cuda_dev=member.gpu)


def observe_logs(model: JobModel, facts: LogFacts) -> None:
    """NICs, node addresses and CUDA devices of ``NET/IB : Using`` and ``NET/Socket : Using``
    lines, and the members of ``Init COMPLETE`` lines."""
    for n in facts.net:
        w = n.where
        if w.host is not None and w.pid is not None:
            model.see_process(w.host, w.pid, cuda_dev=w.cuda_dev, nics=n.nics, addr=n.oob_ip)
    for i in facts.inits:
        w = i.where
        if w.host is not None and w.pid is not None:
            model.see_member(i.comm, i.rank, i.nranks, w.host, w.pid, cuda_dev=i.cuda_dev)
