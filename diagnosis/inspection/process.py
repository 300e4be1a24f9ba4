"""Inspect one rank's process on this machine: its Python stack with py-spy and a Flight
Recorder dump requested through the pipe PyTorch's NCCL backend listens on.

Every step may be refused (py-spy missing, ptrace not permitted, a process of another user, a
job without a Flight Recorder): the refusal is recorded with what would allow it, never raised.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Environment of a torch process that makes its NCCL backend read dump requests from the FIFO
#: ``<PIPE_FILE><rank>.pipe`` and write the dump to ``<TEMP_FILE><rank>``.
FR_PIPE_ENV = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
FR_FILE_ENV = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
FR_BUFFER_ENV = "TORCH_NCCL_TRACE_BUFFER_SIZE"
FR_DEFAULT_FILE = "/tmp/nccl_trace_rank_"


@dataclass(frozen=True)
class ProcessFacts:
    """What is known of a culprit's process, and what to run to look at it."""

    rank: int
    host: str
    pid: int
    #: ``py-spy dump --pid PID``, to run on ``host`` (as the job's user or root).
    command: str
    #: Whether the daemon could look at the process itself (it runs on the daemon's machine).
    local: bool = False
    #: The Python stack py-spy captured, or empty.
    stack: str = ""
    #: Why there is no stack (or empty).
    stack_note: str = ""
    #: What happened to the Flight Recorder dump request.
    flight_recorder: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ProcessFacts:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in obj.items() if k in fields})


def inspect_command(pid: int) -> str:
    return f"py-spy dump --pid {pid}"


def inspect_process(rank: int, host: str, pid: int, *, backend: str = "", local: bool,
                    py_spy: str = "py-spy", timeout_s: float = 10.0,
                    proc_root: Path = Path("/proc")) -> ProcessFacts:
    """The facts of one process; the stack and dump only when it runs on this machine."""
    command = inspect_command(pid)
    if pid <= 0:
        return ProcessFacts(rank, host, pid, command="", stack_note="its collector sent no PID")
    if not local:
        return ProcessFacts(rank, host, pid, command, stack_note=f"on host {host}: run "
                            f"`{command}` there")
    if not (proc_root / str(pid)).is_dir():
        return ProcessFacts(rank, host, pid, command, local=True,
                            stack_note=f"process {pid} is gone", flight_recorder="not requested "
                            "(the process is gone)")
    stack, note = python_stack(pid, py_spy=py_spy, timeout_s=timeout_s)
    return ProcessFacts(rank, host, pid, command, local=True, stack=stack, stack_note=note,
                        flight_recorder=request_flight_recorder(pid, rank, backend,
                                                                proc_root=proc_root))


def python_stack(pid: int, *, py_spy: str = "py-spy",
                 timeout_s: float = 10.0) -> tuple[str, str]:
    """(stack, note): py-spy's dump of every thread, or why there is none. ``--nonblocking``:
    a stopped or hung process is read as it is, not paused (and not resumed by mistake)."""
    # pip puts py-spy beside the interpreter, which a service's PATH may not include
    exe = shutil.which(py_spy) or shutil.which(py_spy, path=os.path.dirname(sys.executable))
    if exe is None:
        return "", (f"{py_spy} is not installed on this node: install the py-spy package "
                    "(pip install py-spy) to capture stacks")
    try:
        out = subprocess.run([exe, "dump", "--nonblocking", "--pid", str(pid)],
                             capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return "", f"py-spy took longer than {timeout_s:.0f} s"
    except OSError as exc:
        return "", f"could not run py-spy: {exc}"
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip(), ""
    err = (out.stderr or out.stdout).strip().splitlines()
    # py-spy may follow its message with a backtrace: the "Error: ..." line says what failed
    said = [line.strip() for line in err if line.strip().startswith("Error")]
    why = said[0] if said else err[-1].strip() if err else \
        f"py-spy exited with {out.returncode}"
    if "ermission" in why or "not permitted" in why:
        why = (f"not permitted ({why}): run the daemon as the job's user, as root, or with "
               "CAP_SYS_PTRACE (kernel.yama.ptrace_scope may also forbid it)")
    return "", why


def read_environ(pid: int, proc_root: Path = Path("/proc")) -> dict[str, str] | None:
    """A process's environment, or None when it may not be read (another user's process)."""
    try:
        raw = (proc_root / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def request_flight_recorder(pid: int, rank: int, backend: str, *,
                            proc_root: Path = Path("/proc")) -> str:
    """Ask the process's NCCL backend for a Flight Recorder dump; say what came of it."""
    if backend and backend != "nccl":
        return (f"not available: the {backend} backend keeps no Flight Recorder (NCCL's "
                "does)")
    env = read_environ(pid, proc_root)
    if env is None:
        return f"not requested: the environment of process {pid} may not be read here"
    stem = env.get(FR_PIPE_ENV, "")
    try:
        buffered = int(env.get(FR_BUFFER_ENV, "0") or 0) > 0
    except ValueError:
        buffered = False
    if not stem or not buffered:
        return (f"not configured: start the job with {FR_BUFFER_ENV}=2000 and "
                f"{FR_PIPE_ENV}=<path prefix> to allow dumps on request")
    pipe = Path(f"{stem}{rank}.pipe")
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return f"not requested: nothing reads {pipe} (the process group is not up)"
        return f"not requested: cannot open {pipe}: {exc.strerror}"
    try:
        os.write(fd, b"1\n")
    except OSError as exc:
        return f"not requested: cannot write {pipe}: {exc.strerror}"
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    dump = f"{env.get(FR_FILE_ENV, FR_DEFAULT_FILE)}{rank}"
    log.info("asked rank %d (pid %d) for a Flight Recorder dump to %s", rank, pid, dump)
    return (f"requested: the dump goes to {dump} (read the ranks' dumps with "
            "`c4 analyze --flight-recorder DIR`)")
