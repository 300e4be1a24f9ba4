"""Which torch.distributed functions are hooked, and where their arguments sit.

Positions are read from the installed torch's signatures at install time, so a release that
reorders or adds parameters is followed without edits here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class OpSpec:
    """One hooked function.

    ``kind``: ``coll`` (collective), ``send`` / ``recv`` (point-to-point) or ``batch``
    (``batch_isend_irecv``). ``data`` names the argument whose bytes are recorded (this rank's
    input; for ``recv`` the receive buffer), ``data_is_list`` when it is a list of tensors.
    ``async_arg`` names the ``async_op`` flag; ``always_async`` marks isend/irecv.
    """

    name: str
    kind: str
    data: str | None = None
    data_is_list: bool = False
    async_arg: str | None = "async_op"
    always_async: bool = False
    peer_arg: str | None = None
    group_peer_arg: str | None = None


SPECS: tuple[OpSpec, ...] = (
    OpSpec("all_reduce", "coll", "tensor"),
    OpSpec("all_gather", "coll", "tensor"),
    OpSpec("all_gather_into_tensor", "coll", "input_tensor"),
    OpSpec("all_gather_single", "coll", "input_tensor"),  # torch >= 2.10's new spelling
    OpSpec("reduce_scatter", "coll", "input_list", data_is_list=True),
    OpSpec("reduce_scatter_tensor", "coll", "input"),
    OpSpec("reduce_scatter_single", "coll", "input"),
    OpSpec("broadcast", "coll", "tensor"),
    OpSpec("reduce", "coll", "tensor"),
    OpSpec("all_to_all", "coll", "input_tensor_list", data_is_list=True),
    OpSpec("all_to_all_single", "coll", "input"),
    OpSpec("barrier", "coll", None),
    # gather/scatter: the tensor argument (gather's input, scatter's output) on every rank.
    OpSpec("gather", "coll", "tensor"),
    OpSpec("scatter", "coll", "tensor"),
    OpSpec("send", "send", "tensor", async_arg=None, peer_arg="dst", group_peer_arg="group_dst"),
    OpSpec("recv", "recv", "tensor", async_arg=None, peer_arg="src", group_peer_arg="group_src"),
    OpSpec("isend", "send", "tensor", async_arg=None, always_async=True, peer_arg="dst",
           group_peer_arg="group_dst"),
    OpSpec("irecv", "recv", "tensor", async_arg=None, always_async=True, peer_arg="src",
           group_peer_arg="group_src"),
    OpSpec("batch_isend_irecv", "batch", async_arg=None, always_async=True),
)


NO_POS = 1 << 30


@dataclass(frozen=True)
class ArgPos:
    """Positional index and keyword name of one argument.

    An argument that cannot be passed by position has ``pos = NO_POS``, so that the hooks'
    ``args[pos] if len(args) > pos else kwargs.get(name)`` needs no other test; an argument the
    function lacks also has an empty name, which no keyword matches.
    """

    pos: int
    name: str


def arg_positions(func: Callable, names: dict[str, str | None]) -> dict[str, ArgPos]:
    """Map roles (``data``, ``group`` ...) to where ``func`` takes the named parameter."""
    params = list(inspect.signature(func).parameters.values())
    positional = [p.name for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    out: dict[str, ArgPos] = {}
    for role, pname in names.items():
        if pname is None or pname not in {p.name for p in params}:
            out[role] = ArgPos(NO_POS, "")
        else:
            out[role] = ArgPos(positional.index(pname) if pname in positional else NO_POS, pname)
    return out
