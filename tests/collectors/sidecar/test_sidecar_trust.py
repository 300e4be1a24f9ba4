"""Local trust: the sidecar's socket has the mode and group the operator sets (0660 by default,
never 0666 unless asked), and a job belongs on the node to the first local user whose ranks
name it: another user's frames for it are refused and counted, and that survives a restart.
The peers are real processes of two other local users."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from collectors.wire import encode_frame
from diagnosis.client import DaemonClient
from tests.collectors.sidecar.harness import Car, stored_keys
from tests.support.frames import group_info, op_batch, rank_info
from tests.support.services import free_port, start_daemon, wait_for

pytestmark = [pytest.mark.network, pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("useradd") is None,
    reason="runs peers as two other local users (needs root, useradd and setpriv)")]

USERS = ("c4test-a", "c4test-b")

# The peer: stdlib only, run by the system interpreter as another user.
PEER = """
import socket, sys
data = sys.stdin.buffer.read()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("denied")
    sys.exit(0)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
s.settimeout(20)
while s.recv(65536):
    pass
print("sent")
"""


@pytest.fixture(scope="module")
def users() -> dict[str, pwd.struct_passwd]:
    for user in USERS:
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell",
                            "/usr/sbin/nologin", user], check=True)
    return {user: pwd.getpwnam(user) for user in USERS}


@pytest.fixture
def sockdir():
    """A directory other users can reach (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="c4-trust-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_user(user: pwd.struct_passwd, sock: Path, *frames) -> tuple[str, int]:
    """Send frames as ``user``; (what the peer said, its pid)."""
    proc = subprocess.Popen(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                             "--clear-groups", "/usr/bin/python3", "-c", PEER, str(sock)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(b"".join(encode_frame(f) for f in frames), timeout=60)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip(), proc.pid


def test_socket_mode_and_group_keep_other_users_out(users, sockdir, tmp_path):
    a, b = users["c4test-a"], users["c4test-b"]
    car = Car(tmp_path, free_port(), sock=sockdir / "default.sock", name="default").start()
    try:
        st = car.sock.stat()
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_uid == os.geteuid()
    finally:
        car.stop()
    car = Car(tmp_path, free_port(), sock=sockdir / "group.sock", name="group",
              extra=["--socket-mode", "0660", "--socket-group", "c4test-a"]).start()
    try:
        st = car.sock.stat()
        assert stat.S_IMODE(st.st_mode) == 0o660
        assert (st.st_uid, st.st_gid) == (os.geteuid(), a.pw_gid)
        assert as_user(b, car.sock, rank_info("jb", 0, 1, "node0"))[0] == "denied"
        assert as_user(a, car.sock, rank_info("ja", 0, 1, "node0"))[0] == "sent"
    finally:
        car.stop()


def test_a_job_belongs_to_its_first_user_across_restarts(users, sockdir, tmp_path):
    a, b = users["c4test-a"], users["c4test-b"]
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    car = Car(tmp_path, port, sock=sockdir / "open.sock", extra=["--socket-mode", "0666"])
    car.start()
    try:
        said, pid_a = as_user(a, car.sock, rank_info("ja", 0, 2, "node0"),
                              group_info("ja", "0", [0, 1]), op_batch("ja", 0, range(100)))
        assert said == "sent"
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: len(client.ops("ja")) == 100, 20, what="user a's records")
            # the pid the node vouches for (SO_PEERCRED), not the one the frame claimed (0)
            assert [(r.rank, r.pid) for r in client.ranks("ja")] == [(0, pid_a)]
            # user b claims a rank of user a's job, and has a job of its own
            forged = (rank_info("ja", 1, 2, "node0"), op_batch("ja", 1, range(100)),
                      rank_info("jb", 0, 1, "node0"), op_batch("jb", 0, range(50)))
            assert as_user(b, car.sock, *forged)[0] == "sent"
            wait_for(lambda: len(client.ops("jb")) == 50, 20, what="user b's own records")
            assert car.metric("c4_sidecar_refused_frames_total", reason="not_owner") == 2
            assert car.dropped() == {"not_owner": 100}
            assert car.stop() == 0
            car.start()  # ownership survives the restart
            assert as_user(b, car.sock, *forged[:2])[0] == "sent"
            wait_for(lambda: car.dropped() == {"not_owner": 100}, 10,
                     what="the refusal counted by the new sidecar")
            assert stored_keys(client, "ja") == [(0, s) for s in range(100)]
            assert [r.rank for r in client.ranks("ja")] == [0]
    finally:
        car.stop()
        daemon.stop()
