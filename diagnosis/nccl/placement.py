"""Where each rank runs, on the topology: host, GPU and NIC from what the sources said.

* host: the process's hostname, matched to a topology host exactly or by short name
  (case-blind); a host named only by address stays an address;
* GPU: ``<host>/gpu<cudaDev>`` when the CUDA device is known (RAS, ``NCCL_DEBUG`` lines) and the
  topology has it; else the host's GPUs in order, the process's place among the host's
  processes (by pid) choosing one;
* NIC: ``<host>/<device>`` when ``NET/IB : Using`` named one device and the topology has it;
  else none (the engine then takes the GPU's NIC from the topology).
"""

from __future__ import annotations

from collections import defaultdict

from c4.topology.protocol import TopologyLike
from diagnosis.nccl.job import ProcInfo, Resolved, natural_key

__all__ = ["Place", "place_ranks"]

Place = tuple[str, "str | None", "str | None"]


def place_ranks(resolved: Resolved, topology: TopologyLike | None = None) -> dict[int, Place]:
    """Rank -> (host, gpu, nic), topology ids where a topology is given."""
    hosts = topology.hosts() if topology is not None else []
    exact = set(hosts)
    short = {h.split(".")[0].lower(): h for h in hosts}
    by_host: dict[str, list[tuple[int, ProcInfo]]] = defaultdict(list)
    for rank, p in resolved.procs.items():
        by_host[p.host].append((rank, p))
    out: dict[int, Place] = {}
    for host, procs in by_host.items():
        topo_host = host if host in exact else short.get(host.split(".")[0].lower())
        procs.sort(key=lambda rp: (rp[1].cuda_dev is None, rp[1].cuda_dev or 0, rp[1].pid))
        # a host is found only in a given topology: topo_host is None without one
        gpus = sorted(topology.gpus(topo_host), key=natural_key) \
            if topo_host is not None and topology is not None else []
        for local, (rank, p) in enumerate(procs):
            if topo_host is None or topology is None:
                out[rank] = (host, None, None)
                continue
            gpu = None
            if p.cuda_dev is not None and f"{topo_host}/gpu{p.cuda_dev}" in set(gpus):
                gpu = f"{topo_host}/gpu{p.cuda_dev}"
            elif local < len(gpus):
                gpu = gpus[local]
            nic = None
            if len(p.nics) == 1:
                cand = f"{topo_host}/{p.nics[0]}"
                if cand in set(topology.nics(topo_host)):
                    nic = cand
            out[rank] = (topo_host, gpu, nic)
    return out
