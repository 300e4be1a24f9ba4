"""Port evidence on a NIC cabled to two switches (``dual_port``): every port down names the NIC
before its cable, one port lost names the cable before the NIC."""

from __future__ import annotations

from c4.report import Suspect
from c4.topology.fabrics import build_fabric
from diagnosis.engine.ports import PortBoard
from diagnosis.engine.records import PortRecords

S = 1_000_000_000


def _board() -> tuple[PortBoard, str, str]:
    topo = build_fabric("dual_port", 2, 8)
    nic = "node000/nic0"
    cable = next(lk for lk in topo.links_of(nic) if "leaf" in lk)
    board = PortBoard(topo)
    board.add(PortRecords.build(["node000", "node001"], [nic, "node001/nic0"], [S, S],
                                ["up", "up"], link_downed=[0, 0]))
    return board, nic, cable


def _suspects(nic: str, cable: str) -> list[Suspect]:
    # as the localizer may rank them: the cable first, the NIC far behind
    return [Suspect("link", cable, 1.0), Suspect("gpu", "node001/gpu0", 0.4),
            Suspect("nic", nic, 0.0)]


def test_a_nic_whose_every_port_went_down_comes_before_its_cable():
    board, nic, cable = _board()
    board.add(PortRecords.build(["node000"], [nic], [2 * S], ["down"], link_downed=[2]))
    out, note = board.weigh(_suspects(nic, cable))
    assert [s.id for s in out[:2]] == [nic, cable]
    assert out[0].score > out[1].score > out[2].score and "port down: " + nic in note


def test_one_port_lost_while_the_nic_stays_up_is_its_cable():
    board, nic, cable = _board()
    board.add(PortRecords.build(["node000"], [nic], [2 * S], ["up"], link_downed=[1]))
    # (the localizer here ranks the NIC first)
    out, note = board.weigh([Suspect("nic", nic, 1.0), Suspect("link", cable, 0.6),
                             Suspect("gpu", "node001/gpu0", 0.4)])
    assert out[0].id == cable and out[0].score == 1.0
    assert [s.id for s in out].index(nic) > 0 and "one port of several down" in note


def test_a_nic_of_one_port_down_ties_with_its_cable():
    topo = build_fabric("rail", 2, 8)
    nic = "node000/nic0"
    cable = next(lk for lk in topo.links_of(nic) if "leaf" in lk)
    board = PortBoard(topo)
    board.add(PortRecords.build(["node000"], [nic], [S], ["down"], link_downed=[1]))
    assert _board()[0].ports(nic) == 2 and board.ports(nic) == 1 and board.ports("x/nic9") == 1
    out, _ = board.weigh([Suspect("link", cable, 1.0), Suspect("nic", nic, 1.0)])
    assert {s.id for s in out} == {nic, cable} and out[0].score == out[1].score == 1.0


def test_a_switch_whose_ports_to_several_nics_went_down_comes_before_each_cable():
    topo = build_fabric("dual_port", 2, 8)
    leaf = next(n for n in topo.neighbors("node000/nic0") if topo.kind(n) == "switch")
    nics = [n for n in topo.neighbors(leaf) if topo.kind(n) == "nic"]
    assert len(nics) >= 2
    board = PortBoard(topo)
    board.add(PortRecords.build([n.split("/")[0] for n in nics], nics, [S] * len(nics),
                                ["up"] * len(nics), link_downed=[0] * len(nics)))
    # each of them lost the port cabled to the leaf and stays up on its other one
    board.add(PortRecords.build([n.split("/")[0] for n in nics], nics, [2 * S] * len(nics),
                                ["up"] * len(nics), link_downed=[1] * len(nics)))
    cable = next(lk for lk in topo.links_of(nics[0]) if leaf in lk)
    out, _ = board.weigh([Suspect("link", cable, 1.0), Suspect("nic", nics[0], 0.8),
                          Suspect("switch", leaf, 0.3)])
    assert [s.id for s in out] == [leaf, cable, nics[0]]
