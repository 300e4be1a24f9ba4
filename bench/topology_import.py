"""How long ``c4 topology import`` takes on each recorded source (the shared topology fixtures),
and ``c4 topology check`` on the biggest: the whole import (read, parse, build, validate as a
topology, serialize), best of ``--repeat`` runs, in this process.

    python -m bench.topology_import [--repeat 5] [--fixtures DIR]

Targets: the NDR fat-tree ``ibnetdiscover`` dump in <= 2 s, the Slurm tree of 10,000 nodes
(the "20k" file: names up to peta19999) in <= 5 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

#: (source, file, target seconds or None)
CASES: list[tuple[str, str, float | None]] = [
    ("ibnetdiscover", "ibnetdiscover_ndr_fattree_topograph_example.out", 2.0),
    ("ibnetdiscover", "ibnetdiscover_manpage_example_rdma_core.txt", None),
    ("ibnetdiscover", "ibnetdiscover_p_edr_infiniband_exporter.txt", None),
    ("ibnetdiscover", "ibnetdiscover_p_hdr_infiniband_exporter.txt", None),
    ("slurm", "slurm_topology_conf_tree_3level_20k_nodes.conf", 5.0),
    ("slurm", "slurm_topology_conf_tree_small.conf", None),
    ("slurm", "slurm_topology_conf_tree_topograph_expected.conf", None),
    ("slurm", "slurm_topology_conf_block_manpage.conf", None),
    ("slurm", "slurm_topology_yaml_multi_manpage.yaml", None),
    ("scontrol", "scontrol_show_topo_tree_gcm_sample.txt", None),
    ("aws", "aws_ec2_describe_instance_topology_cli_doc_example.json", None),
    ("host", "n1=lldpctl_json_roce_host_arista.json", None),
    ("host", "n1=nvidia_smi_topo_m_a800_8gpu_4nic_crlf.txt", None),
    ("host", "n1=ibdev2netdev_dgx_h100_12hca.txt", None),
    ("k8s", "n1=k8s_node_labels_topograph_v1_doc_example.txt", None),
]
CHECKED = "ibnetdiscover_ndr_fattree_topograph_example.out"


def find_fixtures(given: Path | None) -> Path:
    if given is not None:
        return given
    repo = Path(__file__).resolve().parents[1]
    for parent in repo.parents:
        cand = parent / "shared" / "fixtures" / "topology"
        if cand.is_dir():
            return cand
    sys.exit("topology fixtures not found: pass --fixtures DIR (shared/fixtures/topology)")


def best_of(repeat: int, fn) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per file (best is shown)")
    ap.add_argument("--fixtures", type=Path, help="the shared/fixtures/topology folder")
    args = ap.parse_args(argv)
    root = find_fixtures(args.fixtures)

    from c4.topology.check import check_topology
    from c4.topology.importers.sources import run_import

    print(f"{'source':<14} {'file':<52} {'KB':>6} {'hosts':>6} {'switches':>8} {'links':>6} "
          f"{'s':>7} {'target':>7}")
    print("-" * 112)
    failed = []
    checked = None
    for source, name, target in CASES:
        host, _, fname = name.rpartition("=")
        path = root / fname
        arg = f"{host}={path}" if host else str(path)

        def one(source: str = source, arg: str = arg) -> object:
            out = run_import(source, [arg])
            json.dumps(out.topology.to_json())      # as `-o` would write it
            return out
        secs, out = best_of(args.repeat, one)
        c = out.counts  # type: ignore[attr-defined]
        mark = "" if target is None else ("ok" if secs <= target else "SLOW")
        if mark == "SLOW":
            failed.append(fname)
        if fname == CHECKED:
            checked = out.topology  # type: ignore[attr-defined]
        print(f"{source:<14} {fname[:52]:<52} {path.stat().st_size / 1e3:6.0f} {c['hosts']:6d} "
              f"{c['switches']:8d} {c['links']:6d} {secs:7.3f} "
              f"{'' if target is None else f'<= {target:g}':>7} {mark}")
    if checked is not None:
        secs, res = best_of(args.repeat, lambda: check_topology(checked))
        loc = res.localizable  # type: ignore[attr-defined]
        print(f"\nc4 topology check on the NDR fat-tree: {secs:.3f} s ({loc['leaves']} leaves, "
              f"{loc['paths']} paths compared)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
