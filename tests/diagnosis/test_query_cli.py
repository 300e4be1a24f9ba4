"""``c4 faults``, ``c4 jobs``, ``c4 status`` against a real daemon (in this process, real gRPC),
run as a user would with typer's runner: output goes to a pipe, not a terminal."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from diagnosis.report import FaultReport, Suspect
from tests.support.services import free_port

pytestmark = [pytest.mark.network]

LONG_SUMMARY = ("rank 3 stopped making progress in all_reduce on pg tp-0 while its peers "
                "waited for it; the process did not exit and its host keeps reporting")


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://"))
    d.start()
    yield d
    d.stop(grace=0.5)


@pytest.fixture(scope="module")
def hang(daemon):
    return daemon.hub.file("train-a", FaultReport(
        kind="noncomm_hang", suspects=(Suspect("rank", "3", 0.9, rank=3),),
        first_seen_ns=1_700_000_000_000_000_000, summary=LONG_SUMMARY, pg="tp-0", seq=125))


def c4(daemon, *args: str) -> str:
    res = CliRunner().invoke(build_app(), [*args, "--daemon", f"127.0.0.1:{daemon.port}"])
    assert res.exit_code == 0, res.output
    return res.output


def test_piped_fault_table_keeps_ids_and_lines_whole(daemon, hang):
    out = c4(daemon, "faults", "list")
    row = next(line for line in out.splitlines() if hang.id in line)
    assert "noncomm_hang" in row and LONG_SUMMARY in row
    assert "2023-11-14 22:13:20" in row


def test_version():
    import c4 as pkg

    res = CliRunner().invoke(build_app(), ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"c4 {pkg.__version__}"
