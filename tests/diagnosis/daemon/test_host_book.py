"""The daemon's book of hosts' discovered internals: what it keeps, refuses and reloads, and
the ingest path over real gRPC."""

from __future__ import annotations

import json

import grpc
import pytest

from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.decode import Rejected
from diagnosis.daemon.hosts import MAX_INTERNALS_BYTES, HostBook
from diagnosis.daemon.server import Daemon
from diagnosis.store import HostRecord, open_store
from diagnosis.topology.discover import discover_host, recorded_runner
from proto import c4_pb2
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
