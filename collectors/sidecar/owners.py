"""Which local user owns each job on this node.

The rule: **the first uid whose connection names a job owns it on this node**; frames naming
that job from any other uid are refused and counted. Root and the sidecar's own user are
trusted: they may speak for any job and claim none (root could forge anything on the node
anyway). Ownership is by job name, across attempts, and survives a sidecar restart (a small
file next to the log), so a restart is no chance to steal a running job. The table is bounded:
past ``max_jobs`` the job idle longest is forgotten (and could then be claimed anew).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger(__name__)

FILE = "owners.json"


class Owners:
    def __init__(self, directory: Path | None, *, max_jobs: int = 10_000,
                 trusted_uids: frozenset[int] | None = None) -> None:
        self._path = Path(directory) / FILE if directory is not None else None
        self._max = max_jobs
        self.trusted = trusted_uids if trusted_uids is not None else \
            frozenset({0, os.geteuid()})
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, int] = OrderedDict()  # least recently used first
        self._save_lock = threading.Lock()
        self._load()

    def allows(self, job: str, uid: int) -> bool:
        """May ``uid`` speak for ``job``? Claims the job for ``uid`` if nobody owns it."""
        if uid in self.trusted:
            return True
        with self._lock:
            owner = self._jobs.get(job)
            if owner is not None:
                self._jobs.move_to_end(job)
                return owner == uid
            self._jobs[job] = uid
            while len(self._jobs) > self._max:
                self._jobs.popitem(last=False)
            snapshot = list(self._jobs.items())
        log.info("job %r is owned by uid %d on this node (its first local peer)", job, uid)
        self._save(snapshot)
        return True

    def owner(self, job: str) -> int | None:
        with self._lock:
            return self._jobs.get(job)

    def __len__(self) -> int:
        return len(self._jobs)

    def _load(self) -> None:
        if self._path is None or not self._path.exists():
            return
        try:
            data = json.loads(self._path.read_text())
            pairs = [(str(job), int(uid)) for job, uid in data]
        except (OSError, ValueError, TypeError) as exc:
            log.error("cannot read job owners from %s (%s): starting with none; jobs are "
                      "claimed again by their first peer", self._path, exc)
            return
        self._jobs.update(pairs[-self._max:])

    def _save(self, snapshot: list[tuple[str, int]]) -> None:
        if self._path is None:
            return
        tmp = self._path.with_name(f".{FILE}.tmp")
        with self._save_lock:
            try:
                tmp.write_text(json.dumps(snapshot))
                tmp.replace(self._path)
            except OSError as exc:  # e.g. disk full: the claim holds in memory until next save
                log.warning("cannot save job owners to %s: %s", self._path, exc)
                with contextlib.suppress(OSError):
                    tmp.unlink()
