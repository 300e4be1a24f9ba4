"""The lab's state file: what ``up`` built, the services it started, and every injected fault
with its times (the ground truth a diagnosis is scored against). Updates take a file lock, so
the CLI and the timers of ``inject --for`` can change it concurrently."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE_FILE = "lab.json"
LAST_STATE_FILE = "last-lab.json"
#: Environment marker on every process the lab starts (value: the lab directory), so that
#: ``down`` finds them even without a state file.
MARKER = "C4_LAB_MEMBER"


def default_lab_dir() -> Path:
    return Path(os.environ.get("C4_LAB_DIR") or Path(tempfile.gettempdir()) / "c4l-lab")


@contextlib.contextmanager
def locked(lab_dir: Path) -> Iterator[None]:
    lab_dir.mkdir(parents=True, exist_ok=True)
    with open(lab_dir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read(lab_dir: Path) -> dict[str, Any] | None:
    path = lab_dir / STATE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def write(lab_dir: Path, state: dict[str, Any]) -> None:
    path = lab_dir / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def update(lab_dir: Path) -> Iterator[dict[str, Any]]:
    """Read, let the caller change, write back; all under the lock."""
    with locked(lab_dir):
        state = read(lab_dir)
        if state is None:
            raise FileNotFoundError(lab_dir / STATE_FILE)
        yield state
        write(lab_dir, state)


def archive(lab_dir: Path) -> None:
    """Keep the last lab's state (its fault log) as ``last-lab.json`` after ``down``."""
    path = lab_dir / STATE_FILE
    if path.exists():
        os.replace(path, lab_dir / LAST_STATE_FILE)
