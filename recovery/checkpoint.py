"""The checkpoint helper training scripts call (this module imports torch; the controller and
the supervisor never import it).

    ckpt = Checkpointer(directory)              # every rank, after init_process_group
    start = ckpt.load(state) or 0               # state: dict of tensors / Stateful objects
    for step in range(start, steps):
        ...train...
        ckpt.step_done(step, loss=loss)         # progress for the supervisor; commits saves
        if (step + 1) % every == 0:
            ckpt.save(step + 1, state)          # the state after step + 1 steps
    ckpt.close()

Saves go through ``torch.distributed.checkpoint`` (``dcp.async_save`` on a dedicated gloo group,
so training continues while the files are written). A checkpoint is complete only once every
rank's part is on disk: DCP gathers every rank's write result before the coordinator writes the
``.metadata`` file, so when rank 0's save finishes all parts are written, and only then does
rank 0 write the ``COMPLETE`` marker (atomically, recording the step). ``load`` takes the newest
checkpoint whose marker, metadata and data files all check out, and never a partial one.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from recovery.errors import CheckpointError
from recovery.progress import ProgressWriter

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
_DIR = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    saved_ns: int


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _problem(path: Path, step: int) -> str | None:
    """Why the checkpoint at ``path`` cannot be loaded, or None if it is whole."""
    try:
        marker = json.loads((path / MARKER).read_text())
    except FileNotFoundError:
        return "no completion marker (the save never finished)"
    except (OSError, ValueError) as exc:
        return f"unreadable completion marker ({exc})"
    if not isinstance(marker, dict) or marker.get("step") != step:
        return f"the marker names step {marker.get('step') if isinstance(marker, dict) else '?'}"
    try:
        meta = dcp.FileSystemReader(str(path)).read_metadata()
    except Exception as exc:  # torn or missing .metadata: any unpickling error
        return f"unreadable .metadata ({type(exc).__name__}: {exc})"
    needed: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        end = int(info.offset) + int(info.length)
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for name, size in needed.items():
        try:
            have = (path / name).stat().st_size
        except FileNotFoundError:
            return f"data file {name} is missing"
        if have < size:
            return f"data file {name} is torn ({have} of {size} bytes)"
    return None


def list_complete(root: Path | str) -> list[CheckpointInfo]:
    """Every whole checkpoint under ``root``, oldest first; broken ones are logged and left
    out. Needs no process group."""
    root = Path(root)
    found = []
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        m = _DIR.match(child.name)
        if not m or not child.is_dir():
            continue
        step = int(m.group(1))
        why = _problem(child, step)
        if why:
            log.warning("checkpoint %s is not usable: %s", child, why)
            continue
        marker = json.loads((child / MARKER).read_text())
        found.append(CheckpointInfo(step, child, int(marker.get("saved_ns", 0))))
    return sorted(found, key=lambda c: c.step)


def latest_complete(root: Path | str) -> CheckpointInfo | None:
    done = list_complete(root)
    return done[-1] if done else None


class Checkpointer:
    """Saves, commits and loads checkpoints under ``root`` (a directory every rank sees).

    Construct it on every rank after ``init_process_group`` (it creates a process group for
    the background saves, a collective call).
    """

    def __init__(self, root: Path | str, *, use_async: bool = True, keep: int = 3,
                 progress: ProgressWriter | None = None) -> None:
        if keep < 1:
            raise CheckpointError(f"keep={keep}: keep at least one checkpoint")
        self.root = Path(root)
        self.keep = keep
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.use_async = use_async and hasattr(dcp, "async_save")
        # async saves run collectives from a thread: give them their own group, so that they
        # never interleave with the training's collectives on the default group
        self._pg = dist.new_group(backend="gloo") if self.distributed and self.use_async \
            else None
        self._pending: tuple[int, Future[Any], int, Path] | None = None
        self.progress = progress if progress is not None else \
            ProgressWriter() if self.rank == 0 else ProgressWriter(path="")
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)

    # ----- saving ------------------------------------------------------------------------------
    def save(self, step: int, state: dict[str, Any]) -> None:
        """Checkpoint ``state`` as the state after ``step`` steps. Waits for the previous save
        if it is still being written (at most one in flight)."""
        self.wait()
        path = self.root / f"step-{step:09d}"
        if path.exists() and self.rank == 0:
            shutil.rmtree(path)  # a leftover of an attempt that died before completing it
        if self.distributed:
            dist.barrier()
        saved_ns = time.time_ns()
        if self.use_async:
            resp = dcp.async_save(state, checkpoint_id=str(path), process_group=self._pg)
            # newer torch answers an AsyncSaveResponse whose upload_completion is the future,
            # older versions the future itself
            fut = cast("Future[Any]", getattr(resp, "upload_completion", resp))
            self._pending = (step, fut, saved_ns, path)
        else:
            dcp.save(state, checkpoint_id=str(path))
            self._commit(step, saved_ns, path)

    def poll(self) -> None:
        """Commit the save in flight if it has finished (cheap; call it every step)."""
        if self._pending is not None and self._pending[1].done():
            self.wait()

    def wait(self) -> None:
        """Block until the save in flight is written, then commit it."""
        if self._pending is None:
            return
        step, fut, saved_ns, path = self._pending
        self._pending = None
        try:
            fut.result()
        except Exception as exc:
            raise CheckpointError(f"saving the checkpoint of step {step} to {path} failed: "
                                  f"{exc}; check free space and permissions") from exc
        self._commit(step, saved_ns, path)

    def _commit(self, step: int, saved_ns: int, path: Path) -> None:
        if self.rank != 0:
            return
        if not (path / ".metadata").exists():
            raise CheckpointError(f"the save of step {step} finished without {path}/.metadata")
        marker = {"step": step, "saved_ns": saved_ns, "t_ns": time.time_ns(),
                  "world_size": dist.get_world_size() if self.distributed else 1}
        tmp = path / f".{MARKER}.tmp"
        with open(tmp, "w") as fh:
            json.dump(marker, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path / MARKER)
        _fsync_dir(path)
        self.progress.checkpoint(step, saved_ns, str(path))
        log.info("checkpoint of step %d complete in %s", step, path)
        self._prune()

    def _prune(self) -> None:
        done = list_complete(self.root)
        for old in done[:-self.keep]:
            shutil.rmtree(old.path, ignore_errors=True)
        newest = done[-1].step if done else -1
        for child in self.root.iterdir():
            m = _DIR.match(child.name)
            if m and int(m.group(1)) < newest and not (child / MARKER).exists():
                shutil.rmtree(child, ignore_errors=True)  # partial saves of dead attempts

    # ----- progress ----------------------------------------------------------------------------
    def step_done(self, step: int, **fields: Any) -> None:
        """Step ``step`` (0-based) is done: tell the supervisor, commit a finished save."""
        if self.rank == 0:
            self.progress.step(step, **fields)
        self.poll()

    # ----- loading -----------------------------------------------------------------------------
    def latest(self) -> CheckpointInfo | None:
        """The newest complete checkpoint, as rank 0 sees it (every rank gets the same)."""
        info = latest_complete(self.root) if self.rank == 0 else None
        if self.distributed:
            box = [info]
            dist.broadcast_object_list(box, src=0)
            info = box[0]
        return info

    def load(self, state: dict[str, Any]) -> int | None:
        """Load the newest complete checkpoint into ``state`` in place; its step, or None when
        there is none (start from scratch)."""
        t0 = time.monotonic()
        info = self.latest()
        if info is None:
            return None
        dcp.load(state, checkpoint_id=str(info.path))
        if self.rank == 0:
            self.progress.loaded(info.step, time.monotonic() - t0)
        log.info("resumed from the checkpoint of step %d (%s)", info.step, info.path)
        return info.step

    def close(self) -> None:
        """Finish the save in flight; call before the process group is destroyed."""
        self.wait()
