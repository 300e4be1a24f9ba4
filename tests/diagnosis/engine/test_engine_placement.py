"""Where a rank's traffic enters the network when the topology leaves PCIe out (no gpu-nic
links) or the trace names only the rank's host."""

from __future__ import annotations

import logging

import networkx as nx

from c4.topology import Topology
from diagnosis.engine import Engine
from diagnosis.engine.tomography import Component


def _fabric(nics_per_host: int) -> Topology:
    """Two hosts with two GPUs each and ``nics_per_host`` NICs on one switch; no gpu-nic link."""
    g = nx.Graph()
    g.add_node("sw", kind="switch", tier="leaf")
    for h in ("node0", "node1"):
        g.add_node(h, kind="host")
        for i in range(2):
            g.add_node(f"{h}/gpu{i}", kind="gpu", host=h)
            g.add_edge(h, f"{h}/gpu{i}")
        for i in range(nics_per_host):
            g.add_node(f"{h}/nic{i}", kind="nic", host=h)
            g.add_edge(h, f"{h}/nic{i}")
            g.add_edge(f"{h}/nic{i}", "sw", gbps=100)
    return Topology(g)


def test_gpus_use_the_nic_at_their_position_without_pcie_links():
    eng = Engine(_fabric(nics_per_host=2))
    for rank, (h, i) in enumerate([("node0", 0), ("node0", 1), ("node1", 0), ("node1", 1)]):
        eng.add_rank(rank, h, gpu=f"{h}/gpu{i}")
    assert [eng.placement.nic(r) for r in range(4)] == ["node0/nic0", "node0/nic1",
                                                        "node1/nic0", "node1/nic1"]
    _, must = eng.localizer.pair(1, 3)
    assert Component("nic", "node0/nic1") in must and Component("nic", "node1/nic1") in must


def test_a_rank_placed_by_host_only_uses_its_hosts_only_nic():
    eng = Engine(_fabric(nics_per_host=1))
    eng.add_rank(0, "node0")
    eng.add_rank(1, "node1")
    assert (eng.placement.nic(0), eng.placement.nic(1)) == ("node0/nic0", "node1/nic0")


def test_a_host_with_several_nics_and_no_gpu_named_leaves_the_nic_unknown():
    eng = Engine(_fabric(nics_per_host=2))
    eng.add_rank(0, "node0")
    assert eng.placement.nic(0) is None


def test_gpus_missing_from_the_topology_are_named_by_rank_with_one_warning(caplog):
    """A trace from another cluster than the topology's: every rank's gpu is unknown. One
    warning says so, not one per rank (thousands in a large job)."""
    eng = Engine(_fabric(nics_per_host=1))
    with caplog.at_level(logging.WARNING):
        for rank in range(4):
            eng.add_rank(rank, f"host{rank // 2}", gpu=f"host{rank // 2}/gpu{rank % 2}")
    warned = [r.getMessage() for r in caplog.records if "not in the topology" in r.getMessage()]
    assert len(warned) == 1 and "'host0/gpu0'" in warned[0]
    assert eng.placement.unknown_gpus == 4
    assert [eng.placement.suspect(r, 1.0).type for r in range(4)] == ["rank"] * 4


def test_local_rank_names_the_gpu_and_an_unknown_host_is_said(caplog):
    """Without C4_GPU a rank's LOCAL_RANK says which of its host's GPUs it drives; a host the
    topology does not have (a VM's own name) is warned about, once."""
    eng = Engine(_fabric(2))
    eng.add_rank(0, "node1", local_rank=1)
    eng.add_rank(1, "node1")
    assert eng.placement.get(0).gpu == "node1/gpu1"
    assert eng.placement.get(1).gpu is None
    with caplog.at_level(logging.WARNING, logger="diagnosis.engine.placement"):
        eng.add_rank(2, "vm", local_rank=0)
        eng.add_rank(3, "vm", local_rank=1)
    said = [r.getMessage() for r in caplog.records if "topology does not have" in r.getMessage()]
    assert len(said) == 1 and "'vm'" in said[0] and "C4_HOST" in said[0]
    assert eng.placement.get(2).gpu is None and eng.placement.unknown_hosts == 2
