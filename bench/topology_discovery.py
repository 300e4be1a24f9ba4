"""What discovery costs: one sidecar round on recorded tool outputs (parsing and joining; the
tools' own run time is not included), and the daemon assembling a job's topology from N
discovered hosts merged into the Slurm tree of 10,000 nodes, ranks placed. CPU seconds of this
process, best of ``--repeat``.

    python -m bench.topology_discovery [--repeat 3] [--hosts 16,128,1024] [--fixtures DIR]

The daemon assembles a job again when a rank registers or a host's internals change, at most
once per analysis pass: the assembly time bounds the extra delay of that pass.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.topology_import import find_fixtures

MATRIX = "nvidia_smi_topo_m_a800_8gpu_4nic_crlf.txt"
IBDEV = "ibdev2netdev_dgx_h100_12hca.txt"
LLDP = "lldpctl_json_roce_host_arista.json"
FABRIC = "slurm_topology_conf_tree_3level_20k_nodes.conf"


def cpu_best(repeat: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (best is shown)")
    ap.add_argument("--hosts", default="16,128,1024", help="job sizes in hosts (8 ranks each)")
    ap.add_argument("--fixtures", type=Path, help="the shared/fixtures/topology folder")
    args = ap.parse_args(argv)
    root = find_fixtures(args.fixtures)

    from c4.topology.discover import RECORDED, discover_host, recorded_runner
    from c4.topology.importers.slurm_conf import import_slurm_conf
    from c4.topology.job import DISCOVERED, assemble_job
    from c4.topology.model import Topology
    from diagnosis.store import RankRecord

    with tempfile.TemporaryDirectory() as tmp:
        outputs = Path(tmp)
        for (argv_, name), src in zip(RECORDED.items(), (MATRIX, IBDEV, LLDP)):
            del argv_
            (outputs / name).write_bytes((root / src).read_bytes())
        run = recorded_runner(outputs)
        cpu, hi = cpu_best(args.repeat, lambda: discover_host(run, outputs / "nosys",
                                                               hostname="peta10000"))
    size = len(json.dumps(hi.to_json()))
    print(f"sidecar round (3 recorded outputs, no sysfs): {cpu * 1e3:.1f} ms CPU, "
          f"{len(hi.gpus)} GPUs, {len(hi.nics)} NICs, {size} bytes of JSON")

    fabric = Topology(import_slurm_conf(root / FABRIC).graph)
    print(f"fabric {FABRIC}: {len(fabric.hosts())} hosts, {len(fabric.switches())} switches")
    print(f"{'hosts':>6} {'ranks':>6} {'assemble s':>10} {'placed':>7} {'issues':>7}")
    for n in (int(x) for x in args.hosts.split(",")):
        hosts = [f"peta{10000 + i}" for i in range(n)]
        internals = {h: replace(hi, host=h) for h in hosts}
        ranks = [RankRecord("bench", 0, 8 * i + g, 8 * n, h, local_rank=g,
                            cuda_device=str(g)) for i, h in enumerate(hosts) for g in range(8)]
        cpu, jt = cpu_best(args.repeat, lambda ranks=ranks, internals=internals:
                           assemble_job("bench", ranks, internals, fabric, FABRIC))
        placed = sum(p.source == DISCOVERED for p in jt.places.values())
        print(f"{n:>6} {len(ranks):>6} {cpu:>10.2f} {placed:>7} {len(jt.issues):>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
