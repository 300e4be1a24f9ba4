"""Make DistributedDataParallel's gradient all-reduces visible to the hooks.

DDP reduces gradient buckets inside its C++ reducer, which never calls the Python functions that
the collector wraps. Unless the program registers a communication hook of its own, we register
torch's reference Python hook, ``default_hooks.allreduce_hook`` (documented by torch to give the
same results as DDP's built-in reduction: it divides by the group size, then all-reduces), so that
each bucket goes through the hooked ``dist.all_reduce`` and is recorded.

This happens at the first forward of each DDP module, so a hook that the program registers right
after constructing DDP (the documented place) wins and ours is never added. A program that
registers its hook only after the first forward would get torch's "register only once" error:
set ``C4_DDP_HOOK=0`` for it. Done only after ``init_process_group``, when torch is fully imported.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

log = logging.getLogger(__name__)

_patched: tuple[Any, Any] | None = None


def patch_ddp() -> None:
    """Wrap ``DistributedDataParallel._pre_forward`` (idempotent)."""
    global _patched
    if _patched is not None:
        return
    try:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        from torch.nn.parallel import DistributedDataParallel as DDP
    except Exception:
        log.debug("DDP not available; its all-reduces stay unrecorded", exc_info=True)
        return
    orig = DDP._pre_forward

    @functools.wraps(orig)
    def _pre_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_c4_checked", False):
            self._c4_checked = True
            _maybe_register(self, allreduce_hook)
        return orig(self, *args, **kwargs)

    setattr(DDP, "_pre_forward", _pre_forward)  # noqa: B010  (mypy refuses assigning a method)
    orig_builtin = DDP._register_builtin_comm_hook

    @functools.wraps(orig_builtin)
    def _register_builtin_comm_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._c4_checked = True  # the program chose a C++ hook: leave DDP alone
        return orig_builtin(self, *args, **kwargs)

    setattr(DDP, "_register_builtin_comm_hook", _register_builtin_comm_hook)  # noqa: B010
    _patched = (DDP, (orig, orig_builtin))


def unpatch_ddp() -> None:
    global _patched
    if _patched is None:
        return
    cls, (orig, orig_builtin) = _patched
    cls._pre_forward = orig
    cls._register_builtin_comm_hook = orig_builtin
    _patched = None


def _maybe_register(ddp: Any, hook: Any) -> None:
    try:
        if getattr(ddp, "_comm_hooks", None) or getattr(ddp, "_use_python_reducer", False):
            return
        ddp.register_comm_hook(ddp.process_group, hook)
    except Exception:
        log.info("c4 collector: could not route DDP's all-reduces through the hooks; they stay "
                 "unrecorded", exc_info=True)
