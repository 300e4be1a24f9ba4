"""The Topology service: a job's assembled topology for ``c4 topology show --job``."""

from __future__ import annotations

import json
from typing import Any

import grpc

from c4.proto import c4_pb2, c4_pb2_grpc
from diagnosis.daemon.hosts import HostBook
from diagnosis.daemon.live import LiveView
from diagnosis.store import Store


class TopologyService(c4_pb2_grpc.TopologyServicer):
    def __init__(self, store: Store, live: LiveView, hosts: HostBook, fabric: Any = None,
                 fabric_source: str = "") -> None:
        self._store, self._live, self._hosts = store, live, hosts
        self._fabric, self._fabric_source = fabric, fabric_source

    def Job(self, request: c4_pb2.JobTopologyRequest, context: grpc.ServicerContext
            ) -> c4_pb2.JobTopologyResponse:
        if not request.job:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "JobTopologyRequest.job is empty")
        # the live view's is the one its detectors use; a job no longer in it is assembled
        # from its stored registrations
        jt = self._live.job_topology(request.job)
        if jt is None:
            ranks = self._store.ranks(request.job)
            if not ranks:
                context.abort(grpc.StatusCode.NOT_FOUND,
                              f"job {request.job!r} has no registered rank: `c4 jobs` lists "
                              "the jobs the daemon knows")
            from c4.topology.job import assemble_job

            jt = assemble_job(request.job, ranks, self._hosts.internals(), self._fabric,
                              self._fabric_source)
        return c4_pb2.JobTopologyResponse(
            job=request.job, json=json.dumps(jt.to_json(with_graph=request.with_graph)))
