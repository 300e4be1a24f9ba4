"""The systemd units: ExecStart runs a real c4 command with real options, the environment files
set only variables those commands read, the hardening is there and the writable paths are
exactly the store, spill and socket directories the settings name. ``systemd-analyze verify``
checks them too when it is installed (it is not installed for the tests' sake)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from tests.deploy.deploy_support import (
    DEPLOY,
    ROOT_ENVVARS,
    check_c4_argv,
    one,
    read_env_file,
    read_unit,
    values,
)

SYSTEMD = DEPLOY / "systemd"
UNITS = {"c4-daemon.service": "daemon", "c4-sidecar.service": "sidecar",
         "c4-relay.service": "relay"}
# the capabilities the sidecar may keep (see the comment in its unit)
SIDECAR_CAPS = {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}


def _env_file(unit: dict[str, list[tuple[str, str]]]) -> Path:
    (path,) = values(unit["Service"], "EnvironmentFile")
    path = path.lstrip("-")
    assert path.startswith("/etc/c4/"), path
    local = SYSTEMD / PurePosixPath(path).name
    assert local.exists(), f"EnvironmentFile {path} has no template {local.name} in deploy/systemd"
    return local


def _writable_needed(command: str, env: dict[str, str]) -> set[PurePosixPath]:
    if command == "relay":   # it keeps nothing: its sidecars hold what is unacknowledged
        return set()
    if command == "daemon":
        store = env["C4_STORE"]
        assert store.startswith("sqlite:///"), "the unit's default store is the local SQLite file"
        return {PurePosixPath(store.removeprefix("sqlite:///")).parent}
    return {PurePosixPath(env["C4_SPILL_DIR"]), PurePosixPath(env["C4_SIDECAR_SOCKET"]).parent}


@pytest.mark.parametrize("name", sorted(UNITS))
def test_unit_runs_a_real_command_with_its_settings(name: str) -> None:
    unit = read_unit(SYSTEMD / name)
    assert set(unit) == {"Unit", "Service", "Install"}
    service = unit["Service"]
    argv = shlex.split(one(service, "ExecStart"))
    spec = check_c4_argv(argv)
    assert spec.name == UNITS[name]
    env = read_env_file(_env_file(unit), commented=True)
    unknown = set(env) - spec.envvars - ROOT_ENVVARS
    assert not unknown, f"{name}: c4 {spec.name} does not read {sorted(unknown)}"
    for _key, value in service:
        if _key == "Environment":
            for assignment in shlex.split(value):
                var = assignment.split("=", 1)[0]
                assert var in spec.envvars | ROOT_ENVVARS, f"{name}: Environment={var}"


@pytest.mark.parametrize("name", sorted(UNITS))
def test_unit_is_hardened_and_writes_only_where_it_must(name: str) -> None:
    unit = read_unit(SYSTEMD / name)
    service = unit["Service"]
    for key, want in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                      ("PrivateTmp", "yes"), ("PrivateDevices", "yes"),
                      ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"),
                      ("ProtectControlGroups", "yes"), ("RestrictSUIDSGID", "yes"),
                      ("RestrictNamespaces", "yes"), ("LockPersonality", "yes")):
        assert one(service, key) == want, f"{name}: {key}"
    assert one(service, "ProtectHome") in ("yes", "read-only")
    assert one(service, "User") != "root"
    env = read_env_file(_env_file(unit))
    writable = {PurePosixPath(p) for v in values(service, "ReadWritePaths") for p in v.split()}
    assert writable == _writable_needed(UNITS[name], env), name
    # the directories systemd creates for it are the writable ones, nothing more
    made = {PurePosixPath("/var/lib") / d for v in values(service, "StateDirectory")
            for d in v.split()}
    made |= {PurePosixPath("/run") / d for v in values(service, "RuntimeDirectory")
             for d in v.split()}
    assert made == writable, name
    caps = set(one(service, "CapabilityBoundingSet").split())
    assert caps == set(one(service, "AmbientCapabilities").split())
    families = set(one(service, "RestrictAddressFamilies").split())
    if UNITS[name] in ("daemon", "relay"):
        assert caps == set()
        assert families == {"AF_INET", "AF_INET6", "AF_UNIX"}
    else:
        assert caps <= SIDECAR_CAPS
        assert "AF_NETLINK" in families  # sock_diag
        assert one(service, "ProtectHome") == "read-only"
        assert "ProtectProc" not in dict(service)  # it must see the ranks' /proc entries


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (the structural checks above ran)")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    c4 = Path(sys.executable).parent / "c4"
    if not c4.exists():
        pytest.skip("the c4 entry point is not installed beside this Python")
    copies = []
    for name in UNITS:
        # verify insists that the ExecStart binary exists: point it at this checkout's c4
        text = (SYSTEMD / name).read_text().replace("/opt/c4/bin/c4", str(c4))
        (tmp_path / name).write_text(text)
        copies.append(str(tmp_path / name))
    out = subprocess.run(["systemd-analyze", "verify", *copies], capture_output=True,
                         text=True, timeout=60)
    # verify exits 0 on unknown keys and bad values, reporting them on stderr
    complaints = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode == 0 and not complaints, "\n".join(complaints)
    # and it does complain about what it should
    (tmp_path / "bad.service").write_text(
        (tmp_path / "c4-daemon.service").read_text().replace("NoNewPrivileges=yes",
                                                              "NoNewPrivilege=yes"))
    bad = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "bad.service")],
                         capture_output=True, text=True, timeout=60)
    assert "Unknown key" in bad.stderr
