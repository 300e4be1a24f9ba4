"""Where a 3D-parallel job's ranks run and which communicators they form.

Global rank ``r = t + TP * (s + PP * d)`` for tensor-parallel index ``t``, pipeline stage ``s``
and data-parallel index ``d``; ranks fill hosts in order (the topology's default placement). So
a tensor-parallel group lives inside one host, consecutive pipeline stages sit on different hosts
(when TP fills a host), and the members of a data-parallel group all use the same local GPU
index, hence the same rail. Arrays of one value per rank reshape to ``[d, s, t]`` with
``.reshape(DP, PP, TP)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from c4.topology import Topology
from diagnosis.sim.config import SimConfig


@dataclass
class Layout:
    tp: int
    pp: int
    dp: int
    hosts: list[str]            # host ids in placement order
    host_of: np.ndarray         # rank -> index into hosts
    gpu: list[str]              # rank -> gpu id
    nic: list[str]              # rank -> nic id
    groups: list[tuple[str, list[int]]]   # (pg name, member ranks in communicator order)

    @property
    def world(self) -> int:
        return len(self.gpu)

    @classmethod
    def build(cls, cfg: SimConfig, topo: Topology) -> Layout:
        placement = topo.default_placement(cfg.gpus)
        hosts: list[str] = []
        index: dict[str, int] = {}
        host_of = np.empty(cfg.gpus, dtype=np.int64)
        gpus, nics = [], []
        for rank in range(cfg.gpus):
            host, gpu, nic = placement[rank]
            if host not in index:
                index[host] = len(hosts)
                hosts.append(host)
            host_of[rank] = index[host]
            gpus.append(gpu or f"{host}/gpu0")
            nics.append(nic or "")
        tp, pp, dp = cfg.tp, cfg.pp, cfg.dp
        ranks = np.arange(cfg.gpus).reshape(dp, pp, tp)
        groups: list[tuple[str, list[int]]] = []
        if tp > 1:
            groups += [(tp_name(d * pp + s), ranks[d, s, :].tolist())
                       for d in range(dp) for s in range(pp)]
        if pp > 1:
            groups += [(pp_name(d * tp + t), ranks[d, :, t].tolist())
                       for d in range(dp) for t in range(tp)]
        if dp > 1:
            groups += [(dp_name(s * tp + t), ranks[:, s, t].tolist())
                       for s in range(pp) for t in range(tp)]
        return cls(tp, pp, dp, hosts, host_of, gpus, nics, groups)

    def rank_of_gpu(self, gpu: str) -> int:
        try:
            return self.gpu.index(gpu)
        except ValueError:
            raise KeyError(f"GPU {gpu!r} runs no rank of this job") from None

    def group_ids(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per rank, the index of its tp, pp and dp group among ``groups`` (-1 if none)."""
        d, s, t = np.meshgrid(np.arange(self.dp), np.arange(self.pp), np.arange(self.tp),
                              indexing="ij")
        ntp = self.dp * self.pp if self.tp > 1 else 0
        npp = self.dp * self.tp if self.pp > 1 else 0
        tp_g = (d * self.pp + s) if self.tp > 1 else np.full(d.shape, -1)
        pp_g = (ntp + d * self.tp + t) if self.pp > 1 else np.full(d.shape, -1)
        dp_g = (ntp + npp + s * self.tp + t) if self.dp > 1 else np.full(d.shape, -1)
        return tp_g.ravel(), pp_g.ravel(), dp_g.ravel()


def tp_name(i: int) -> str:
    return f"tp.{i}"


def pp_name(i: int) -> str:
    return f"pp.{i}"


def dp_name(i: int) -> str:
    return f"dp.{i}"
