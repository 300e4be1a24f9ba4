"""The CLI's daemon commands take --tls-ca / --tls-cert / --tls-key / --token (or C4_*), and
say what to do when the daemon refuses them (a real daemon, the real `c4` command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from c4.security.tokens import TokenTable
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.pki import make_pki

pytestmark = [pytest.mark.network]

READ, INGEST = "r" * 32, "i" * 32


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            tls_cert=str(pki.server_cert), tls_key=str(pki.server_key)),
               tokens=TokenTable({READ: "read", INGEST: "ingest"}))
    d.start()
    yield f"127.0.0.1:{d.port}", pki
    d.stop(grace=1)


def c4(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("C4_")}
    return subprocess.run([sys.executable, "-m", "c4", *args], capture_output=True, text=True,
                          timeout=60, env={**clean, **(env or {})})


def test_flags_reach_the_daemon(daemon):
    address, pki = daemon
    token = pki.ca.parent / "read.token"
    token.write_text(READ + "\n")
    token.chmod(0o600)
    ok = c4("faults", "list", "--format", "json", "--daemon", address, "--tls-ca", str(pki.ca),
            "--token-file", str(token))
    assert ok.returncode == 0, ok.stderr + ok.stdout
    assert json.loads(ok.stdout) == {"reports": []}


def test_a_token_on_the_command_line_is_refused(daemon):
    """Typed on the command line, a token is readable by every local user in
    /proc/PID/cmdline for as long as the process runs."""
    address, pki = daemon
    out = c4("status", "--daemon", address, "--tls-ca", str(pki.ca), "--token", READ)
    assert out.returncode == 2 and "C4_TOKEN" in out.stderr and "--token-file" in out.stderr
    assert READ not in out.stderr + out.stdout


def test_environment_works_too(daemon):
    address, pki = daemon
    ok = c4("jobs", "--daemon", address, env={"C4_TLS_CA": str(pki.ca), "C4_TOKEN": READ})
    assert ok.returncode == 0, ok.stderr + ok.stdout


def test_refusals_say_what_to_do(daemon):
    address, pki = daemon
    missing = c4("status", "--daemon", address, "--tls-ca", str(pki.ca))
    assert missing.returncode == 2 and "C4_TOKEN" in missing.stdout + missing.stderr
    wrong_role = c4("status", "--daemon", address, "--tls-ca", str(pki.ca),
                    env={"C4_TOKEN": INGEST})
    out = wrong_role.stdout + wrong_role.stderr
    assert wrong_role.returncode == 2 and "read" in out and "role" in out
    no_ca = c4("status", "--daemon", address, env={"C4_TOKEN": READ})
    assert no_ca.returncode == 2


def test_recover_takes_the_options():
    out = c4("recover", "--help").stdout
    assert all(flag in out for flag in ("--tls-ca", "--tls-cert", "--tls-key", "--token-file"))
