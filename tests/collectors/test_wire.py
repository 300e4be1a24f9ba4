"""``collectors.wire.read_available``, how the shipper (and the tests' acknowledged rank) take
the sidecar's acknowledgements: what arrived so far, without waiting, on a real socket pair;
the socket's timeout is kept; a closed peer is told apart from a quiet one."""

from __future__ import annotations

import socket
import time

from c4.proto import c4_pb2
from collectors.wire import decode_acks, encode_ack, read_available


def test_reads_what_arrived_without_waiting_and_keeps_the_timeout():
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(7.0)
        inbox = bytearray()
        t0 = time.monotonic()
        assert read_available(a, inbox) and inbox == b""        # quiet: at once, still alive
        assert time.monotonic() - t0 < 1.0 and a.gettimeout() == 7.0
        acks = [c4_pb2.IngestAck(sidecar="s", seq=n) for n in (1, 2)]
        b.sendall(b"".join(encode_ack(x) for x in acks))
        time.sleep(0.05)
        assert read_available(a, inbox)
        assert [x.seq for x in decode_acks(inbox)] == [1, 2] and inbox == b""
        b.sendall(encode_ack(acks[0]))
        b.close()
        time.sleep(0.05)
        assert not read_available(a, inbox)                    # closed: what came is kept
        assert [x.seq for x in decode_acks(inbox)] == [1] and a.gettimeout() == 7.0
