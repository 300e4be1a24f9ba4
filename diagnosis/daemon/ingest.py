"""The Ingest service: validate each request, hand it to the writer, acknowledge once stored."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc

from diagnosis.daemon.decode import Rejected, to_write
from diagnosis.daemon.writer import Writer
from proto import c4_pb2, c4_pb2_grpc

log = logging.getLogger(__name__)

_CODES = {code.value[0]: code for code in grpc.StatusCode}


@dataclass
class SidecarInfo:
    sidecar: str
    host: str
    last_seen_ns: int
    stats: c4_pb2.SidecarStats | None = None


class IngestService(c4_pb2_grpc.IngestServicer):
    def __init__(self, writer: Writer, known_jobs: set[str], *, max_records: int) -> None:
        self._writer = writer
        self._known = known_jobs
        self._max_records = max_records
        self._lock = threading.Lock()
        self.sidecars: dict[str, SidecarInfo] = {}
        self.rejected = 0

    # -- one request ---------------------------------------------------------------------
    def _accept(self, req: c4_pb2.IngestRequest,
                reply: Callable[[c4_pb2.IngestAck], None]) -> None:
        """Reply now (rejected, or statistics) or once the request is stored."""
        self._seen(req)
        if req.WhichOneof("body") == "stats":
            reply(c4_pb2.IngestAck(seq=req.seq, sidecar=req.sidecar))
            return
        try:
            with self._lock:
                write = to_write(req, self._known, max_records=self._max_records)
                if req.WhichOneof("body") == "rank":
                    self._known.add(req.rank.job)
        except Rejected as exc:
            self.rejected += 1
            log.warning("rejected request %d from %s: %s", req.seq, req.sidecar, exc.message)
            reply(c4_pb2.IngestAck(seq=req.seq, sidecar=req.sidecar, code=exc.code.value[0],
                                    error=exc.message))
            return
        seq, sidecar = req.seq, req.sidecar
        self._writer.submit(write, lambda dup: reply(
            c4_pb2.IngestAck(seq=seq, sidecar=sidecar, duplicate=dup)))

    def _seen(self, req: c4_pb2.IngestRequest) -> None:
        if not req.sidecar:
            return
        with self._lock:
            info = self.sidecars.get(req.sidecar)
            if info is None:
                info = self.sidecars[req.sidecar] = SidecarInfo(req.sidecar, "", 0)
            info.last_seen_ns = time.time_ns()
            if req.WhichOneof("body") == "stats":
                info.stats = req.stats
                info.host = req.stats.host
            elif req.WhichOneof("body") == "rank" and not info.host:
                info.host = req.rank.host

    # -- RPCs --------------------------------------------------------------------------------
    def Send(self, request: c4_pb2.IngestRequest, context: grpc.ServicerContext
             ) -> c4_pb2.IngestAck:
        box: queue.Queue[c4_pb2.IngestAck] = queue.Queue(maxsize=1)
        self._accept(request, box.put)
        ack = box.get()
        if ack.code:
            context.abort(_CODES.get(ack.code, grpc.StatusCode.UNKNOWN), ack.error)
        return ack

    def Stream(self, request_iterator: Iterator[c4_pb2.IngestRequest],
               context: grpc.ServicerContext) -> Iterator[c4_pb2.IngestAck]:
        acks: queue.Queue[c4_pb2.IngestAck | None] = queue.Queue()
        state = {"outstanding": 0, "done": False}
        lock = threading.Lock()

        def reply(ack: c4_pb2.IngestAck) -> None:
            with lock:
                state["outstanding"] -= 1
            acks.put(ack)

        def read() -> None:
            try:
                for req in request_iterator:
                    with lock:
                        state["outstanding"] += 1
                    self._accept(req, reply)
            except Exception as exc:  # the client went away; stored requests stay stored
                log.debug("ingest stream ended: %s", exc)
            finally:
                with lock:
                    state["done"] = True
                acks.put(None)

        threading.Thread(target=read, name="c4-ingest-reader", daemon=True).start()
        while context.is_active():
            try:
                ack = acks.get(timeout=0.5)
            except queue.Empty:
                continue
            if ack is not None:
                yield ack
            with lock:
                finished = state["done"] and state["outstanding"] == 0
            if finished and acks.empty():
                return

