"""Training progress as JSON lines: rank 0 of the training script appends one line per step and
per complete checkpoint (``recovery.checkpoint`` does it); the supervisor tails the file to
learn the first step after a restart, the checkpoints, and the last step before a stop.

The file is ``C4_RECOVERY_PROGRESS`` (set by ``c4 launch``); without it nothing is written.
No torch here: the supervisor reads these files.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV_PROGRESS = "C4_RECOVERY_PROGRESS"


class ProgressWriter:
    """Appends progress lines; a no-op without a path (so scripts run the same outside
    ``c4 launch``)."""

    def __init__(self, path: Path | str | None = None) -> None:
        path = path if path is not None else os.environ.get(ENV_PROGRESS)
        self.path = Path(path) if path else None

    def _write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        # one short write in append mode: a reader sees whole lines or a torn last line
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")

    def step(self, step: int, **fields: Any) -> None:
        """Step ``step`` (0-based) is done; ``fields`` such as loss go along."""
        self._write({"event": "step", "step": int(step), "t_ns": time.time_ns(), **fields})

    def loaded(self, step: int, seconds: float) -> None:
        """The checkpoint of step ``step`` was loaded, in ``seconds``."""
        self._write({"event": "loaded", "step": int(step), "t_ns": time.time_ns(),
                     "load_s": round(seconds, 4)})

    def checkpoint(self, step: int, saved_ns: int, path: str) -> None:
        """The checkpoint of the state after ``step`` steps is complete on disk."""
        self._write({"event": "checkpoint", "step": int(step), "saved_ns": int(saved_ns),
                     "t_ns": time.time_ns(), "path": path})


@dataclass
class ProgressReader:
    """Reads new whole lines from a progress file, remembering where it stopped."""

    path: Path
    offset: int = 0
    last_step: int | None = None
    first_step: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)

    def poll(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for raw in chunk[:end].splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                log.warning("skipping a malformed line in %s: %r", self.path, raw[:80])
                continue
            if rec.get("event") == "step":
                self.last_step = int(rec["step"])
                if self.first_step is None:
                    self.first_step = rec
            out.append(rec)
        return out
