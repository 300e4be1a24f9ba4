"""The capabilities the sidecar unit grants are the ones it needs, and enough: a sampler process
with exactly the unit's capability set (as root's uid with everything else dropped from the
bounding set, and no_new_privs, as the unit runs it) finds the TCP socket held by another user's
process and reads its TCP_INFO; with no capability at all it still reads its own sockets (so
sock_diag needs none: no CAP_NET_ADMIN) but not the other user's."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.deploy.deploy_support import DEPLOY, REPO, one, read_unit

pytestmark = [pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv (util-linux) to run a process as another user and with "
           "chosen capabilities")]

PROBE = """\
import json, os, socket, sys
from collectors.linkstats.tcp import sample_tcp
other = int(sys.argv[1])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
c = socket.create_connection(srv.getsockname()); a, _ = srv.accept()
c.sendall(b"x" * 10000); a.recv(65536)
own = [s for s in sample_tcp([os.getpid()]) if s.pid == os.getpid()]
theirs = [s for s in sample_tcp([other]) if s.pid == other]
print(json.dumps({"own": len(own), "theirs": len(theirs),
                  "own_bytes": max((s.bytes_acked for s in own), default=0)}))
"""


def _unit_caps() -> list[str]:
    service = read_unit(DEPLOY / "systemd" / "c4-sidecar.service")["Service"]
    return one(service, "CapabilityBoundingSet").split()


def _probe(caps: list[str], other_pid: int) -> dict[str, int]:
    bounding = "-all" + "".join(f",+{c.lower().removeprefix('cap_')}" for c in caps)
    out = subprocess.run(
        ["setpriv", "--no-new-privs", f"--bounding-set={bounding}", "--inh-caps=-all", "--",
         sys.executable, "-c", PROBE, str(other_pid)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_unit_capabilities_read_another_users_sockets_and_none_are_needed_for_own() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    # another user's process holding a TCP socket (sleep inherits it)
    other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              "--", "sleep", "60"], pass_fds=(held.fileno(),))
    try:
        caps = _unit_caps()
        assert set(caps) == {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}
        granted = _probe(caps, other.pid)
        assert granted["theirs"] >= 1, "the unit's capabilities do not reach other users' ranks"
        assert granted["own"] >= 1 and granted["own_bytes"] >= 10000
        bare = _probe([], other.pid)
        assert bare["own"] >= 1 and bare["own_bytes"] >= 10000  # sock_diag: no capability
        assert bare["theirs"] == 0  # another user's /proc/<pid>/fd is closed without them
        for cap in caps:  # and each of the two is needed
            assert _probe([c for c in caps if c != cap], other.pid)["theirs"] == 0, cap
    finally:
        other.kill()
        other.wait()
        for s in (held, peer, server):
            s.close()
