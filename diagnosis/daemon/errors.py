"""Why the daemon refuses a request: a gRPC status and a message that says what to do."""

from __future__ import annotations

import grpc


class Rejected(Exception):
    """A request that is not stored. Final unless ``parked_job`` is set: then only its job is
    over a limit that may clear (the sender holds that job's requests back and resends them
    later; its other jobs go on)."""

    def __init__(self, code: grpc.StatusCode, message: str, *, parked_job: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.parked_job = parked_job
