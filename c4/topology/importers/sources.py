"""The sources ``c4 topology import`` reads, and the import itself: files of one source
imported and joined, then merged into an existing topology if one is given. The issues of
every import are kept in the topology's graph attribute ``import_issues``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from c4.topology.importers.common import Fabric, Issue, TopologyImportError, counts
from c4.topology.importers.merge import merge
from c4.topology.model import Topology

#: source -> (layer, what it reads)
SOURCES: dict[str, tuple[str, str]] = {
    "ibnetdiscover": ("fabric", "ibnetdiscover output, default or -p (several files: several "
                      "subnets or planes)"),
    "slurm": ("fabric", "Slurm topology.conf (tree, block, ring), topology.yaml, or saved "
              "scontrol show topology"),
    "scontrol": ("fabric", "saved scontrol show topology (same as slurm)"),
    "aws": ("fabric", "aws ec2 describe-instance-topology JSON"),
    "k8s": ("fabric", "Kubernetes node topology labels: kubectl get nodes -o json/yaml, or one "
            "node's 'key: value' lines"),
    "lldp": ("host", "lldpctl -f json (or json0): the switch port of each interface"),
    "nvidia-smi": ("host", "nvidia-smi topo -m: GPUs and the NIC each one uses"),
    "ibdev2netdev": ("host", "ibdev2netdev (-v): RDMA device, interface, link state"),
    "host": ("host", "any of lldp, nvidia-smi, ibdev2netdev outputs (detected), or the JSON of "
             "c4 topology discover; files of one host are joined"),
}


@dataclass(frozen=True)
class ImportOptions:
    host: str | None = None          # the host of host-layer files given without HOST=
    name: str | None = None          # the topology of a topology.yaml to import
    name_map: Path | None = None     # ibnetdiscover --node-name-map file


@dataclass
class ImportOutcome:
    topology: Topology
    issues: list[Issue] = field(default_factory=list)    # this import's

    @property
    def counts(self) -> dict[str, Any]:
        return counts(self.topology.graph)


def split_file_arg(arg: str, default_host: str | None) -> tuple[str | None, Path]:
    """``HOST=FILE`` or ``FILE``; an existing file whose name holds '=' is taken whole."""
    if "=" in arg and not Path(arg).exists():
        host, _, path = arg.partition("=")
        return host, Path(path)
    return default_host, Path(arg)


def import_files(source: str, files: list[str], opts: ImportOptions = ImportOptions()) -> Fabric:
    """One source's files as one topology fragment."""
    if source not in SOURCES:
        raise TopologyImportError(f"unknown source {source!r}; one of {', '.join(SOURCES)}")
    if not files:
        raise TopologyImportError(f"{source}: give at least one file")
    layer = SOURCES[source][0]
    pairs = [split_file_arg(f, opts.host) for f in files]
    if layer == "host":
        from c4.topology.importers.host import read_internals, to_fabric
        kind = None if source == "host" else source
        out = to_fabric(read_internals(pairs, kind), source)
    else:
        out = Fabric(source)
        for i, (host, path) in enumerate(pairs):
            part = _fabric_file(source, host, path, opts)
            if i == 0:
                out.graph, out.issues = part.graph, list(part.issues)
            else:
                res = merge(out.graph, part.graph, str(path))
                out.graph, out.issues = res.graph, [*out.issues, *part.issues, *res.issues]
    out.graph.graph["sources"] = [f"{source}:{p}" for _, p in pairs]
    return out


def _fabric_file(source: str, host: str | None, path: Path, opts: ImportOptions) -> Fabric:
    if source == "ibnetdiscover":
        from c4.topology.importers.ibnetdiscover import import_ibnetdiscover, read_name_map
        return import_ibnetdiscover(path, read_name_map(opts.name_map) if opts.name_map
                                    else None)
    if source in ("slurm", "scontrol"):
        if path.suffix in (".yaml", ".yml"):
            from c4.topology.importers.slurm_yaml import import_slurm_yaml
            return import_slurm_yaml(path, opts.name)
        from c4.topology.importers.slurm_conf import import_slurm_conf
        return import_slurm_conf(path)
    if source == "aws":
        from c4.topology.importers.aws import import_aws
        return import_aws(path)
    from c4.topology.importers.k8s import import_k8s
    return import_k8s(path, host)


def run_import(source: str, files: list[str], opts: ImportOptions = ImportOptions(),
               existing: Path | None = None) -> ImportOutcome:
    """Import, merge into ``existing`` if given, and check the result against the format."""
    frag = import_files(source, files, opts)
    issues = list(frag.issues)
    prior: list[Issue] = []
    graph = frag.graph
    if existing is not None:
        base = Topology.load(existing).graph
        prior = [Issue.from_json(i) for i in base.graph.get("import_issues", [])]
        res = merge(base, graph, source)
        graph, issues = res.graph, [*issues, *res.issues]
    graph.graph["import_issues"] = [i.to_json() for i in [*prior, *issues]]
    topo = Topology.from_json(nx.node_link_data(graph, edges="links"), source=source)
    return ImportOutcome(topo, issues)
