"""c4 installed from its wheel, not from the checkout: build the wheel, install it into a fresh
virtual environment outside the checkout, and run a real gloo job under `c4 run` and under
`c4 launch`, its ranks reporting to a daemon and a sidecar started from that environment.

The third-party dependencies come from the interpreter running the tests (a .pth file in the new
environment names its site-packages); c4's own packages come only from the wheel, and every
process started here runs outside the checkout without PYTHONPATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from c4.processes import REPO, Service, free_port
from diagnosis.client import DaemonClient
from tests.support.services import wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.network, pytest.mark.slow]

JOB_SCRIPT = Path(__file__).with_name("wheel_job.py")
# Files in the package folders that are documentation for readers of the source, not the wheel's.
NOT_SHIPPED = {"README.md"}


def _copy_sources(dest: Path) -> None:
    """The project file and every top-level package (pyproject's packages.find picks which go
    into the wheel): the build is in-tree (build/, *.egg-info), so it runs on a copy and leaves
    the checkout, which other test runs may be reading, untouched."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for init in REPO.glob("*/__init__.py"):
        if init.parent.name not in ("tests", "bench"):
            shutil.copytree(init.parent, dest / init.parent.name,
                            ignore=shutil.ignore_patterns("__pycache__"))


def _wheel_packages(wheel: Path) -> list[str]:
    """The top-level packages the wheel installs."""
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist() if "/" in n}
    return sorted(t for t in tops if not t.endswith(".dist-info"))


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1", **extra}


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    elsewhere: Path   # a working directory outside the checkout

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def c4(self) -> str:
        return str(self.venv / "bin" / "c4")

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=self.elsewhere, env=_clean_env(), capture_output=True,
                              text=True, timeout=timeout)

    def service(self, args: list[str], log: Path) -> Service:
        svc = Service(args, log)
        svc.env = _clean_env()
        return svc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    assert not tmp.resolve().is_relative_to(REPO), "the test needs a temp dir outside the checkout"
    _copy_sources(tmp / "src")
    # --no-build-isolation: the build backend (setuptools) from this interpreter, no download.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                            "--no-build-isolation", "--quiet", "-w", str(tmp / "dist"),
                            str(tmp / "src")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp / "dist").glob("c4-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             env=_clean_env(), capture_output=True, text=True, check=True)
    # Appended after the venv's own site-packages, and its .pth files are not read: an
    # editable install of c4 there stays inactive.
    Path(purelib.stdout.strip(), "deps-from-test-interpreter.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "--no-deps", "--no-index", "--quiet", str(wheel)],
                          env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return Installed(wheel, venv, elsewhere)


def _under(path: str, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(root.resolve())


def test_the_wheel_holds_every_file_of_its_packages(installed):
    """Modules and package data alike (the generated code's type stubs, the start-up hook
    ``c4 run`` puts on PYTHONPATH, anything read through ``__file__`` or importlib.resources):
    a file in a package folder that setuptools leaves out on its own needs a line in pyproject's
    package-data. (The schema, proto/c4.proto, stays in the repository: nothing reads it at run
    time.)"""
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    tops = _wheel_packages(installed.wheel)
    assert {"c4", "collectors", "diagnosis", "recovery", "traffic_planner"} <= set(tops)
    files = {p.relative_to(REPO).as_posix() for top in tops for p in (REPO / top).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.name not in NOT_SHIPPED
             and not p.name.endswith(".pyc")}
    assert {"collectors/autoinstall/sitedir/sitecustomize.py", "c4/proto/c4_pb2.pyi"} <= files
    assert sorted(files - names) == []


def test_c4_is_imported_from_the_installed_wheel(installed):
    """Every package of the wheel, the CLI and the daemon client (and with them the generated
    protobuf and gRPC code, whatever its package is called) load from the venv."""
    ours = _wheel_packages(installed.wheel)
    probe = ("import importlib, json, sys\n"
             f"for name in {ours!r} + ['c4.cli', 'diagnosis.client']:\n"
             "    importlib.import_module(name)\n"
             "print(json.dumps({'path': sys.path, 'files': {n: m.__file__ for n, m in "
             f"sys.modules.items() if n.split('.')[0] in {ours!r} or "
             "n.endswith(('_pb2', '_pb2_grpc'))}}))")
    out = installed.run(installed.python, "-c", probe)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    files = seen["files"]
    assert any(n.endswith("_pb2") for n in files) and any(n.endswith("_pb2_grpc") for n in files)
    assert {n for n, f in files.items() if not _under(f, installed.venv)} == set(), files
    # (the test interpreter's site-packages, where the dependencies come from, may lie inside
    # the checkout: a venv made there)
    assert not [p for p in seen["path"] if p and _under(p, REPO)
                   and not _under(p, Path(sys.prefix))], \
        seen["path"]
    version = installed.run(installed.c4, "--version")
    assert version.returncode == 0 and "0.1.0" in version.stdout, version.stdout + version.stderr


@pytest.fixture(scope="module")
def services(installed: Installed, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[str, Path]]:
    """A daemon and a sidecar, both from the wheel: (the daemon's address, the sidecar socket)."""
    work = tmp_path_factory.mktemp("services")
    addr = f"127.0.0.1:{free_port()}"
    daemon = installed.service([installed.c4, "daemon", "--listen", addr, "--store",
                                f"sqlite:///{work / 'c4.db'}"], work / "daemon.log").start()
    sock = work / "sidecar.sock"
    sidecar = installed.service([installed.c4, "sidecar", "--daemon", addr, "--socket",
                                 str(sock), "--host", "local", "--spill-dir",
                                 str(work / "spill")], work / "sidecar.log")
    try:
        wait_for(DaemonClient(addr, timeout=2.0).status, 60, what=f"the daemon at {addr}")
        sidecar.start()
        wait_for(sock.exists, 60, what=f"the sidecar socket {sock}")
        yield addr, sock
    finally:
        sidecar.stop()
        daemon.stop()


def _job_script(installed: Installed) -> tuple[str, Path]:
    """The job script, copied outside the checkout (its folder is the ranks' sys.path[0]), and
    a fresh folder for the ranks' results."""
    script = installed.elsewhere / JOB_SCRIPT.name
    shutil.copy2(JOB_SCRIPT, script)
    out = installed.elsewhere / f"results-{len(list(installed.elsewhere.glob('results-*')))}"
    out.mkdir()
    return str(script), out


def _check_results(out: Path, installed: Installed, hosts: list[str],
                   pythonpath: str | None) -> None:
    results = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert [p.name for p in sorted(out.glob("rank*.json"))] == [
        f"rank{i}-{h}.json" for i, h in enumerate(hosts)]
    for r in results:
        assert r["installed"] and r["sum"] == 2.0 ** 10 and r["world"] == 2
        assert any(n.endswith("_pb2") for n in r["modules"]), r["modules"]
        assert all(_under(f, installed.venv) for f in r["modules"].values()), r["modules"]
        assert r["checkout_on_path"] == [] and r["pythonpath"] == pythonpath


def _stored_ops(installed: Installed, addr: str, job: str) -> Counter[tuple[int, str]]:
    out = installed.run(installed.c4, "ops", job, "--daemon", addr, "--format", "json")
    assert out.returncode == 0, out.stderr
    return Counter((r["rank"], r["op"]) for r in json.loads(out.stdout)["ops"])


def _wait_for_all_reduces(installed: Installed, addr: str, job: str) -> None:
    want = {(0, "all_reduce"): 10, (1, "all_reduce"): 10}
    wait_for(lambda: {k: v for k, v in _stored_ops(installed, addr, job).items()
                      if k[1] == "all_reduce"} == want,
             60, what=f"the daemon to store job {job}'s 10 all_reduces per rank")


def test_a_job_under_c4_run(installed, services):
    addr, sock = services
    script, out = _job_script(installed)
    run = installed.run(installed.c4, "run", "--job", "wheel-run", "--sidecar-socket",
                        str(sock), "--", installed.python, "-m", "torch.distributed.run",
                        "--standalone", "--nproc-per-node", "2", script, str(out), str(REPO),
                        "auto", timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # c4 run puts its start-up hook, and only that, on PYTHONPATH
    (site_dir,) = installed.venv.glob("lib/python*/site-packages/collectors/autoinstall/sitedir")
    _check_results(out, installed, ["local", "local"], str(site_dir))
    _wait_for_all_reduces(installed, addr, "wheel-run")


def test_a_job_under_c4_launch(installed, services, tmp_path):
    addr, sock = services
    script, out = _job_script(installed)
    run = installed.run(installed.c4, "launch", "--job", "wheel-launch", "--hosts",
                        "node0,node1", "--workdir", str(tmp_path / "launch"), "--journal",
                        str(tmp_path / "journal.db"), "--isolator",
                        f"blocklist:{tmp_path / 'blocklist.json'}", "--sidecar-socket",
                        str(sock), "--", script, str(out), str(REPO), "install", timeout=300)
    logs = "".join(p.read_text(errors="replace")[-2000:]
                   for p in sorted((tmp_path / "launch").glob("*.log")))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:] + logs
    # the installed c4 is found as the launching process found it, through the interpreter
    _check_results(out, installed, ["node0", "node1"], None)
    _wait_for_all_reduces(installed, addr, "wheel-launch")
