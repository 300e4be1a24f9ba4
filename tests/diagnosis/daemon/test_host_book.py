"""The daemon's book of hosts' discovered internals: what it keeps, refuses and reloads, and
the ingest path over real gRPC."""

from __future__ import annotations

import json

import grpc
import pytest

from c4.proto import c4_pb2
from c4.topology.discover import discover_host, recorded_runner
from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.decode import Rejected
from diagnosis.daemon.hosts import MAX_INTERNALS_BYTES, HostBook
from diagnosis.daemon.server import Daemon
from diagnosis.store import HostRecord, open_store
from tests.support.topology_fixtures import recorded_outputs


@pytest.fixture(scope="module")
def internals(tmp_path_factory) -> str:
    folder = recorded_outputs(tmp_path_factory.mktemp("outputs"))
    hi = discover_host(recorded_runner(folder), folder / "nosys", hostname="n1")
    return json.dumps(hi.to_json())


def msg(text: str, host: str = "n1", t_ns: int = 10) -> c4_pb2.HostTopology:
    return c4_pb2.HostTopology(host=host, t_ns=t_ns, internals=text, digest="d")


def test_keeps_the_newest_and_refuses_what_it_cannot_read(tmp_path, internals):
    url = f"sqlite:///{tmp_path / 'c4.db'}"
    store = open_store(url)
    book = HostBook(store)
    assert book.put(msg(internals, t_ns=10), "car-1") and book.generation == 1
    assert not book.put(msg(internals, t_ns=5))          # an older resend
    assert book.put(msg(internals, t_ns=11)) and book.generation == 2
    assert len(book.internals()["n1"].gpus) == 8
    for bad, why in [(msg("{not json"), "is not the JSON of c4 topology discover"),
                     (msg(json.dumps({"host": "n1"})), "is not the JSON of c4 topology"),
                     (msg(internals, host="n2"), "HostTopology.host is 'n2' but its internals "
                                                 "describe 'n1'"),
                     (msg(internals, host=""), "HostTopology.host is empty"),
                     (msg(" " * (MAX_INTERNALS_BYTES + 1)), "the daemon takes at most")]:
        with pytest.raises(Rejected, match=why) as info:
            book.put(bad)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    store.put_host(HostRecord("n9", 1, "garbage"))        # e.g. written by a broken version
    store.close()
    store = open_store(url)
    try:
        again = HostBook(store)
        assert list(again.internals()) == ["n1"]           # n9 skipped, with a warning
        assert again.put(msg(internals, t_ns=10)) is False
    finally:
        store.close()


def test_ingest_takes_host_internals_over_grpc(internals):
    daemon = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://"))
    daemon.start()
    try:
        with DaemonClient(f"127.0.0.1:{daemon.port}") as client:
            ack = client.send(c4_pb2.IngestRequest(sidecar="car", seq=1,
                                                   host_topology=msg(internals)))
            assert ack.code == 0 and len(daemon.hosts) == 1
            with pytest.raises(DaemonError, match="is not the JSON of c4 topology discover") \
                    as info:
                client.send(c4_pb2.IngestRequest(sidecar="car", seq=2,
                                                 host_topology=msg("[]")))
            assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
            status = client.status()
            assert [s.host for s in status.sidecars] == ["n1"]
    finally:
        daemon.stop(grace=1)


def test_the_live_view_joins_hosts_once_registration_settles(internals, monkeypatch):
    """A job of 4 hosts whose ranks register over three passes: one join for the first rank,
    none while more keep coming, one when all are in; a host's new internals join again."""
    from c4.topology import job as job_mod
    from diagnosis.daemon.faults import FaultHub
    from diagnosis.daemon.live import LiveView
    from diagnosis.store import RankRecord, Write

    joins: list[frozenset[str]] = []
    real = job_mod.join_hosts

    def counted(job, hosts, *args, **kwargs):
        joins.append(frozenset(hosts))
        return real(job, hosts, *args, **kwargs)
    monkeypatch.setattr(job_mod, "join_hosts", counted)
    book = HostBook()
    hi = json.loads(internals)
    for i, h in enumerate(["n0", "n1", "n2", "n3"]):
        book.put(msg(json.dumps({**hi, "host": h}), host=h, t_ns=i + 1))
    live = LiveView(FaultHub(open_store("memory://")), hosts=book)
    seq = iter(range(1, 100))

    def register(*ranks: int) -> None:
        live.apply([Write("s", next(seq), RankRecord("j", 0, r, 8, f"n{r // 2}",
                                                     cuda_device=str(r % 2)))
                    for r in ranks])
        live.drain()
        live.analyze()
    register(0)
    register(1, 2)
    register(3, 4, 5)
    assert joins == [frozenset({"n0"})]         # still registering: not joined again
    register(6, 7)
    assert joins[-1] == frozenset({"n0", "n1", "n2", "n3"}) and len(joins) == 2
    engine = live._jobs[("j", 0)].engine
    assert (engine.placement.get(7).gpu, engine.placement.get(7).nic) == ("n3/gpu1",
                                                                          "n3/mlx5_0")
    live.analyze()
    assert len(joins) == 2                      # nothing changed
    book.put(msg(json.dumps({**hi, "host": "n2"}), host="n2", t_ns=99))
    live.analyze()
    assert len(joins) == 3
