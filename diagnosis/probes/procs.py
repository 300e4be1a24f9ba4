"""Running a probe's processes: each in its own session, all under one deadline, everything a
process started killed when the deadline passes or one of them fails."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from diagnosis.probes.api import ProbeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Finished:
    """What one process left behind."""

    args: tuple[str, ...]
    returncode: int | None  # None: killed at the deadline
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Outcome:
    procs: tuple[Finished, ...]
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(p.returncode == 0 for p in self.procs)

    def failure(self) -> str:
        """Why it failed, in one line, with the end of the failing process's stderr."""
        if self.timed_out:
            return f"timed out after {self.seconds:.1f} s"
        bad = next((p for p in self.procs if p.returncode not in (0, None)), None)
        if bad is None:
            return ""
        tail = (bad.stderr.strip() or bad.stdout.strip()).splitlines()[-3:]
        return (f"{os.path.basename(bad.args[0])} exited with code {bad.returncode}"
                + (f": {' | '.join(tail)}" if tail else ""))


def run_all(commands: Sequence[Sequence[str]], timeout: float,
            env: Sequence[dict[str, str] | None] | None = None) -> Outcome:
    """Start every command at once; wait until all exit, one fails, or ``timeout`` passes.

    Output goes to temporary files (a pipe nobody reads would stall a chatty process).

    Raises:
        ProbeError: a command's program does not exist or cannot be executed.
    """
    envs = list(env) if env is not None else [None] * len(commands)
    t0 = time.monotonic()
    started: list[tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]] = []
    with contextlib.ExitStack() as files:
        try:
            for args, extra in zip(commands, envs):
                out = files.enter_context(tempfile.TemporaryFile())
                err = files.enter_context(tempfile.TemporaryFile())
                try:
                    proc = subprocess.Popen(list(args), stdout=out, stderr=err,
                                            env={**os.environ, **(extra or {})},
                                            start_new_session=True)
                except (FileNotFoundError, PermissionError) as exc:
                    raise ProbeError(f"cannot run {args[0]!r}: {exc.strerror}; install it or "
                                     "point the probe at the directory that has it") from exc
                started.append((proc, out, err))
            timed_out = _wait(started, t0 + timeout)
            before = [p.poll() for p, _, _ in started]
        finally:
            for proc, _, _ in started:
                _kill(proc)
        done = tuple(Finished(tuple(args), code, _read(out), _read(err))
                     for args, (_, out, err), code in zip(commands, started, before))
    return Outcome(done, timed_out, time.monotonic() - t0)


def _wait(started: list, deadline: float) -> bool:
    """True when the deadline passed with a process still running."""
    while True:
        codes = [p.poll() for p, _, _ in started]
        if all(c is not None for c in codes):
            return False
        if any(c not in (None, 0) for c in codes):
            return False  # one failed: the others would wait for it forever
        if time.monotonic() > deadline:
            return True
        time.sleep(0.02)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    running = proc.poll() is None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # and whatever it started
    if running:
        log.debug("killed %s", proc.args)
    proc.wait()


def _read(fh: IO[bytes]) -> str:
    fh.seek(0)
    return fh.read().decode(errors="replace")
