"""A second daemon on a port already served refuses to start instead of sharing it."""

from __future__ import annotations

import pytest

from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from diagnosis.errors import DiagnosisError
from tests.support.services import free_port

pytestmark = [pytest.mark.network]


def test_second_daemon_on_same_port_is_refused():
    listen = f"127.0.0.1:{free_port()}"
    first = Daemon(DaemonConfig(listen=listen, store="memory://"))
    first.start()
    try:
        with pytest.raises(DiagnosisError) as info:
            Daemon(DaemonConfig(listen=listen, store="memory://"))
        msg = str(info.value)
        assert listen in msg and "in use" in msg
    finally:
        first.stop(grace=0.5)
