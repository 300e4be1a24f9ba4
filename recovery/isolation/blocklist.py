"""The default backend: a JSON file of blocked nodes on local disk. ``c4 launch`` reads it
before every (re)start and while the job runs, and restarts its job without a node that
appears in it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from recovery.errors import IsolationError
from recovery.isolation.api import Isolator


def default_blocklist_path() -> Path:
    """``C4_BLOCKLIST``, else ``blocklist.json`` beside the recovery journal."""
    if os.environ.get("C4_BLOCKLIST"):
        return Path(os.environ["C4_BLOCKLIST"])
    from recovery.journal import default_journal_path
    return default_journal_path().with_name("blocklist.json")


class BlocklistIsolator(Isolator):
    name = "blocklist"

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else default_blocklist_path()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def _read(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise IsolationError(f"the blocklist {self.path} is unreadable ({exc}); fix or "
                                 "remove it") from None
        nodes = doc.get("nodes") if isinstance(doc, dict) else None
        if not isinstance(nodes, dict):
            raise IsolationError(f"the blocklist {self.path} has no 'nodes' object; fix or "
                                 "remove it")
        return nodes

    def _write(self, nodes: dict[str, Any]) -> None:
        # write-then-rename: a reader sees the old list or the new one, never half of one
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"nodes": nodes}, indent=1, sort_keys=True))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def isolate(self, node: str, reason: str) -> None:
        with self._locked():
            nodes = self._read()
            if node not in nodes:
                nodes[node] = {"reason": reason, "t_ns": time.time_ns()}
                self._write(nodes)

    def release(self, node: str) -> None:
        with self._locked():
            nodes = self._read()
            if nodes.pop(node, None) is not None:
                self._write(nodes)

    def isolated(self) -> Mapping[str, str]:
        return {node: str(entry.get("reason", "")) for node, entry in self._read().items()}

    def restart(self, job: str, exclude: Collection[str]) -> str:
        return (f"blocklist {self.path} holds {', '.join(sorted(exclude))}; the job's "
                "supervisor (c4 launch) restarts it without them")
