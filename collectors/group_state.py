"""What the hooks keep per process group and per thread (``collectors.hook`` and the wrappers
it builds, ``collectors.batch`` among them)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class ThreadFlags(threading.local):
    busy = False  # inside a hooked call on this thread: inner hooked calls are not recorded


class GroupState:
    """What the hooks know about one process group."""

    __slots__ = ("idx", "invoke", "name", "no_future", "p2p", "ranks", "seq", "skip")

    def __init__(self, idx: int = -1, name: str = "", ranks: tuple[int, ...] = (),
                 skip: bool = False) -> None:
        self.idx = idx
        self.name = name
        self.ranks = ranks
        self.seq = 0
        # (is_send, global peer) -> messages so far in that direction
        self.p2p: dict[tuple[bool, int], int] = {}
        self.skip = skip
        # ops (string indices) whose async Works on this group have no future
        self.no_future: set[int] = set()
        # None: the wrappers' own wall-clock path; else a replacement (CUDA-event timing)
        self.invoke: Callable[..., Any] | None = None
