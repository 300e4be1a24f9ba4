"""The daemon's control messages reach, through a relay, the sidecars they are meant for; the
relay's limits and refusals say what to do (a real daemon and relay in this process, real
gRPC; the sidecars are raw ingest streams)."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest

from c4.proto import c4_pb2, c4_pb2_grpc
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from diagnosis.errors import ConfigError
from diagnosis.relay.config import RelayConfig
from diagnosis.relay.server import Relay
from tests.support.frames import group_info, rank_info
from tests.support.services import wait_for

pytestmark = [pytest.mark.network]


class Car:
    """A sidecar's stream to the relay: requests numbered in order, acks and controls kept."""

    def __init__(self, port: int, name: str) -> None:
        self.name = name
        self.seq = 0
        self.acks: list[c4_pb2.IngestAck] = []
        self.controls: list[c4_pb2.Control] = []
        self.error: grpc.RpcError | None = None
        self._out: queue.Queue[c4_pb2.IngestRequest | None] = queue.Queue()
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._call = c4_pb2_grpc.IngestStub(self._channel).Stream(iter(self._out.get, None))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for ack in self._call:
                (self.controls.append(ack.control) if ack.HasField("control")
                 else self.acks.append(ack))
        except grpc.RpcError as exc:
            self.error = exc

    def send(self, *reqs: c4_pb2.IngestRequest) -> None:
        for req in reqs:
            self.seq += 1
            req.sidecar, req.seq = self.name, self.seq
            self._out.put(req)

    def acked(self) -> list[int]:
        return sorted(a.seq for a in self.acks if not a.code)

    def kinds(self) -> list[str]:
        return [c.WhichOneof("body") for c in self.controls]

    def close(self) -> None:
        self._out.put(None)
        self._channel.close()


@pytest.fixture
def relayed():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://", analyze_interval_s=0.2,
                            max_requests_per_second=0))
    d.start()
    r = Relay(RelayConfig(listen="127.0.0.1:0", daemon=f"127.0.0.1:{d.port}", upstreams=2,
                          max_streams=5, workers=8))
    r.start()
    wait_for(lambda: all(link.state()[0] for link in r.service.links), 20,
             what="the relay's streams to the daemon")
    cars: list[Car] = []

    def car(name: str) -> Car:
        cars.append(Car(r.port, name))
        return cars[-1]

    try:
        yield d, r, car
    finally:
        for c in cars:
            c.close()
        r.stop(grace_s=0.5)
        d.stop(grace=1)


def _join(c: Car, job: str, ranks: list[int], host: str, world: int) -> None:
    c.send(*(rank_info(job, r, world, host) for r in ranks),
           group_info(job, "0", list(range(world))))
    wait_for(lambda: c.acked() == list(range(1, len(ranks) + 2)), 20,
             what=f"{c.name}'s requests acknowledged")


def test_schedules_details_and_inspections_reach_their_sidecars(relayed):
    d, _, car = relayed
    a, b = car("car-a"), car("car-b")
    _join(a, "j", [0, 1], "hostA", 4)
    _join(b, "j", [2, 3], "hostB", 4)
    # each sidecar's acknowledgements came back to it alone, through one relay
    assert [x.sidecar for x in a.acks] == ["car-a"] * 3
    assert [x.sidecar for x in b.acks] == ["car-b"] * 3

    sched = c4_pb2.SampleSchedule(job="j", version=3, default_sample=16)
    assert d.control.publish(sched) >= 1
    for c in (a, b):
        wait_for(lambda c=c: "schedule" in c.kinds(), 10, what=f"{c.name}'s schedule")
        assert c.controls[0].schedule.version == 3

    # a detail request for rank 3 goes to hostB's sidecar alone
    asked = d.control.request_detail(c4_pb2.DetailRequest(job="j", request=7, ranks=[3]),
                                     {"hostB"})
    assert asked == {"hostB"}
    wait_for(lambda: "detail" in b.kinds(), 10, what="the detail request at hostB")
    assert [c.detail.ranks for c in b.controls if c.HasField("detail")] == [[3]]
    assert d.control.request_inspect(c4_pb2.InspectRequest(request=8, job="j", rank=0,
                                                           host="hostA"))
    wait_for(lambda: "inspect" in a.kinds(), 10, what="the inspection at hostA")
    assert "detail" not in a.kinds() and "inspect" not in b.kinds()

    # a sidecar that joins the job later gets its schedule at once, from the relay
    c = car("car-c")
    c.send(rank_info("j", 4, 5, "hostC"))
    wait_for(lambda: "schedule" in c.kinds(), 10, what="the late sidecar's schedule")
    assert c.controls[0].schedule.version == 3
    # a sidecar whose ranks registered before this relay ran: its statistics name their host
    late = car("car-d")
    late.send(group_info("j", "0", list(range(4))),
              c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(host="hostD", collectors=[
                  c4_pb2.CollectorStats(job="j", rank=6, t_ns=1)])))
    wait_for(lambda: late.acked() == [1, 2], 10, what="car-d's requests acknowledged")
    assert d.control.request_detail(c4_pb2.DetailRequest(job="j", request=9, ranks=[6]),
                                    {"hostD"}) == {"hostD"}
    wait_for(lambda: "detail" in late.kinds(), 10, what="the detail request at hostD")
    assert [x.detail.request for x in b.controls if x.HasField("detail")] == [7]
    # a sidecar of another job never gets this one's
    other = car("car-o")
    _join(other, "other", [0], "hostO", 1)
    assert all(x.schedule.job != "j" for x in other.controls if x.HasField("schedule"))


def test_the_relay_refuses_streams_past_its_limit_and_single_requests(relayed):
    _, r, car = relayed
    cars = [car(f"car-{i}") for i in range(5)]
    for i, c in enumerate(cars):
        c.send(rank_info("k", i, 5, f"h{i}"))
    wait_for(lambda: all(c.acked() == [1] for c in cars), 20, what="five streams served")
    extra = car("car-x")
    extra.send(rank_info("k", 9, 10, "hx"))
    wait_for(lambda: extra.error is not None, 10, what="the sixth stream refused")
    assert extra.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-streams" in extra.error.details()
    with grpc.insecure_channel(f"127.0.0.1:{r.port}") as ch, \
            pytest.raises(grpc.RpcError) as err:
        c4_pb2_grpc.IngestStub(ch).Send(rank_info("k", 0, 1, "h"), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "to the daemon itself" in err.value.details()


def test_a_broken_daemon_stream_ends_the_sidecar_streams_it_carried(relayed):
    d, _, car = relayed
    a = car("car-a")
    _join(a, "m", [0], "hostA", 1)
    d.stop(grace=0.2)   # the daemon goes: the relay's streams to it end
    wait_for(lambda: a.error is not None, 20, what="the sidecar's stream ended")
    assert a.error.code() == grpc.StatusCode.UNAVAILABLE
    assert "resend what is unacknowledged" in a.error.details()


def test_a_relay_the_daemon_throttles_starts_afresh_instead_of_being_refused_for_ever():
    """The daemon refuses everything on a stream after a request over the sender's limit; the
    relay must not keep carrying its sidecars into that stream."""
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://", analyze_interval_s=0.2,
                            max_requests_per_second=5))
    d.start()
    r = Relay(RelayConfig(listen="127.0.0.1:0", daemon=f"127.0.0.1:{d.port}", upstreams=1,
                          workers=8, max_streams=4))
    r.start()
    cars: list[Car] = []
    try:
        wait_for(lambda: r.service.links[0].state()[0], 20, what="the relay's stream")
        cars.append(Car(r.port, "burst"))
        cars[0].send(*(rank_info("t", i, 40, "h") for i in range(40)))
        wait_for(lambda: cars[0].error is not None, 20, what="the throttled stream ended")
        assert any(a.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0] for a in cars[0].acks)
        assert cars[0].error.code() == grpc.StatusCode.UNAVAILABLE
        assert "--max-requests-per-second" in cars[0].error.details()
        # once the limit's bucket has refilled, a sidecar is served again through the relay
        # (a stream the daemon throttled would refuse it however long it waited)
        time.sleep(1.5)
        wait_for(lambda: r.service.links[0].state()[0], 20, what="a fresh stream")
        cars.append(Car(r.port, "later"))
        cars[1].send(rank_info("t", 0, 40, "h"))
        wait_for(lambda: cars[1].acks, 20, what="an answer")
        assert [a.code for a in cars[1].acks] == [0]
    finally:
        for c in cars:
            c.close()
        r.stop(grace_s=0.5)
        d.stop(grace=1)


@pytest.mark.parametrize("kwargs, words", [
    ({"max_streams": 8, "workers": 8}, "--max-streams (8) must be below --workers"),
    ({"daemon": "nohost"}, "--daemon address 'nohost' needs HOST:PORT"),
    ({"upstreams": 0}, "upstreams"),
    ({"tls_cert": "c.pem"}, "both --tls-cert and --tls-key"),
])
def test_bad_settings_say_what_to_change(kwargs, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        RelayConfig(**kwargs)
