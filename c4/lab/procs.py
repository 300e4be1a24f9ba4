"""The lab's processes: finding them (by the marker in their environment), the ranks of a job
and which GPU they stand for, and cgroup v1 groups (cpu quota, freezer) for compute faults."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from c4.lab.layout import PREFIX
from c4.lab_state import MARKER

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: the cgroup v1 hierarchies the lab uses, and the v2 one ("unified": no controllers here, but
#: every group there has its own PSI files, which is how a lab host gets a pressure of its own)
CONTROLLERS = ("cpu", "freezer", "memory", "unified")


@dataclass(frozen=True)
class LabProc:
    pid: int
    env: dict[str, str]

    @property
    def host(self) -> str:
        return self.env.get("C4_HOST", "")

    @property
    def rank(self) -> int | None:
        r = self.env.get("RANK")
        return int(r) if r is not None and r.isdigit() else None

    @property
    def gpu(self) -> str:
        """The topology GPU id of a rank: its host and local rank (set by ``c4 lab run``)."""
        lr = self.env.get("LOCAL_RANK")
        return f"{self.host}/gpu{lr}" if lr is not None and self.host else ""

    @property
    def is_rank(self) -> bool:
        # torchrun's agent carries the marker too, but only workers get LOCAL_RANK
        return "LOCAL_RANK" in self.env


def environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def lab_processes(lab_dir: str | None = None) -> list[LabProc]:
    """Every live process carrying the lab marker (of ``lab_dir``, or of any lab)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = environ(int(entry))
        if env is None or MARKER not in env:
            continue
        if lab_dir is not None and env[MARKER] != lab_dir:
            continue
        if _is_zombie(int(entry)):
            continue
        out.append(LabProc(int(entry), env))
    return out


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and not _is_zombie(pid)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kill_all(pids: list[int], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL what is left after ``timeout``. Frozen processes are thawed first
    by the caller (a frozen process cannot die)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# ----- cgroup v1 ------------------------------------------------------------------------
def cgroup_of(pid: int, controller: str) -> str:
    """The cgroup path (relative to the controller's mount) that ``pid`` is in."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hier, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(",") or (controller == "unified" and hier == "0"):
            return path
    return "/"


def cgroup_dir(controller: str, name: str) -> Path:
    if not name.startswith(PREFIX):
        raise ValueError(f"lab cgroups are named {PREFIX}...; refusing {name!r}")
    return CGROUP_ROOT / controller / name


def make_cgroup(controller: str, name: str, settings: dict[str, str]) -> Path:
    path = cgroup_dir(controller, name)
    path.mkdir(exist_ok=True)
    for key, value in settings.items():
        (path / key).write_text(value)
    return path


def move(pid: int, cgroup: Path) -> None:
    """Move a whole process (every thread: cgroup.procs in v1) into ``cgroup``."""
    (cgroup / "cgroup.procs").write_text(str(pid))


def remove_cgroup(controller: str, name: str, back_to: dict[int, str] | None = None) -> None:
    """Thaw, move members back (to where they were, else the parent), remove the group."""
    path = cgroup_dir(controller, name)
    if not path.exists():
        return
    if controller == "freezer":
        with contextlib.suppress(OSError):
            (path / "freezer.state").write_text("THAWED")
    for _ in range(50):
        pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
        if not pids:
            break
        for pid in pids:
            dest = CGROUP_ROOT / controller / (back_to or {}).get(pid, "/").lstrip("/")
            if not dest.exists() or dest == path:
                dest = path.parent
            with contextlib.suppress(OSError):
                move(pid, dest)
        time.sleep(0.02)
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)  # exiting members may linger a moment
    log.warning("could not remove cgroup %s", path)


@contextlib.contextmanager
def cpu_quota(pid: int, percent: float) -> Iterator[Path]:
    """Throttle every thread of ``pid`` to ``percent`` of one CPU while the block runs (a
    throwaway lab-named cgroup, so that ``c4 lab down`` also removes one left by a crash)."""
    name = f"{PREFIX}q{uuid.uuid4().hex[:8]}"
    back = {pid: cgroup_of(pid, "cpu")}
    group = make_cgroup("cpu", name, {"cpu.cfs_period_us": "100000",
                                      "cpu.cfs_quota_us": str(int(1000 * percent))})
    try:
        move(pid, group)
        yield group
    finally:
        remove_cgroup("cpu", name, back)


def leftover_cgroups() -> list[tuple[str, str]]:
    out = []
    for controller in CONTROLLERS:
        base = CGROUP_ROOT / controller
        if base.is_dir():
            out += [(controller, p.name) for p in base.iterdir()
                    if p.is_dir() and p.name.startswith(PREFIX)]
    return out


def freeze_wait(cgroup: Path, timeout: float = 10.0) -> None:
    (cgroup / "freezer.state").write_text("FROZEN")
    deadline = time.monotonic() + timeout
    while (cgroup / "freezer.state").read_text().strip() != "FROZEN":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{cgroup} did not freeze in {timeout:.0f} s")
        time.sleep(0.02)


def host_psi_group(host: str) -> Path:
    """The cgroup v2 group whose PSI files are lab host ``host``'s pressure: its sidecar reads
    them (``--health-cgroup``); ``cpu-contention`` puts the host's ranks and the burners in it."""
    return CGROUP_ROOT / "unified" / f"{PREFIX}h-{host}"


#: A second mount of the cgroup v2 hierarchy, outside /sys: ``ip netns exec`` remounts /sys
#: for the namespace (without the cgroup mounts), so a sidecar in a lab host reads its PSI here.
PSI_MOUNT = Path(tempfile.gettempdir()) / f"{PREFIX}cgroup2"


def psi_mounted() -> bool:
    try:
        mounts = Path("/proc/mounts").read_text().split("\n")
    except OSError:
        return False
    return any(line.split(" ")[1:2] == [str(PSI_MOUNT)] for line in mounts if line)


def mount_psi() -> Path:
    PSI_MOUNT.mkdir(exist_ok=True)
    if not psi_mounted():
        subprocess.run(["mount", "-t", "cgroup2", "none", str(PSI_MOUNT)], check=True,
                       capture_output=True)
    return PSI_MOUNT


def unmount_psi() -> bool:
    """Unmount and remove the PSI view; True if there was one."""
    was = psi_mounted()
    if was:
        subprocess.run(["umount", "-l", str(PSI_MOUNT)], check=False, capture_output=True)
    with contextlib.suppress(OSError):
        PSI_MOUNT.rmdir()
    return was


def host_psi_view(host: str) -> Path:
    """``host_psi_group`` as a lab host's sidecar sees it (through ``PSI_MOUNT``)."""
    return PSI_MOUNT / f"{PREFIX}h-{host}"
