"""Identifiers as NCCL's sources spell them, brought to one spelling.

The same 64-bit communicator hash (``comm->commHash``) is printed differently by every source:
``0x`` and unpadded hex (Inspector, RAS JSON, ``NCCL_DEBUG`` init lines), 16 zero-padded hex
digits without ``0x`` (RAS text), ``0x`` and 16 digits (CoMMA), a decimal number (the example
profiler's ``CommHash``). :func:`comm_hash` reads any of them; :func:`hash_text` writes the one
spelling c4 uses. The Inspector (up to 2.30 at least) prints its hash into 17 bytes, so a hash of
more than 14 hex digits loses its last ones (``0xb0f9bac4b2c2d091`` is written
``0xb0f9bac4b2c2d0``, seen on a GPU): :func:`inspector_id` gives what it writes for a full hash,
to match the two. Operation names go the same way: NCCL's ``AllReduce``, CoMMA's
``all_reduce``, OTel's ``ncclAllReduce`` and PyTorch's ``ALLREDUCE`` all become torch's
``all_reduce`` (the trace format's spelling).
"""

from __future__ import annotations

import re

__all__ = ["NCCL_COLLECTIVES", "RAS_COLLECTIVES", "bytes_from_msg", "comm_hash", "hash_text",
           "inspector_id", "is_p2p", "msg_from_bytes", "nccl_func", "op_name"]

_HEX16 = re.compile(r"[0-9a-fA-F]{16}")
#: hex digits of a communicator hash that the Inspector's id keeps
INSPECTOR_HASH_DIGITS = 14
_MAX = (1 << 64) - 1

#: NCCL function names (``ncclFuncToString``) -> the trace format's op names (torch spelling)
_NCCL_OPS = {
    "AllReduce": "all_reduce", "AllGather": "all_gather", "AllGatherV": "all_gather",
    "ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "Reduce": "reduce",
    "AllToAll": "all_to_all", "AlltoAll": "all_to_all", "Gather": "gather",
    "Scatter": "scatter", "Send": "send", "Recv": "recv", "SendRecv": "send_recv",
}
#: PyTorch's ``OpType`` names (``opTypeToString``) -> torch op names
_TORCH_OPTYPES = {
    "BROADCAST": "broadcast", "ALLREDUCE": "all_reduce", "ALLREDUCE_COALESCED": "all_reduce",
    "REDUCE": "reduce", "ALLGATHER": "all_gather", "_ALLGATHER_BASE": "all_gather",
    "ALLGATHER_COALESCED": "all_gather", "ALLGATHER_INTO_TENSOR_COALESCED": "all_gather",
    "GATHER": "gather", "SCATTER": "scatter", "REDUCE_SCATTER": "reduce_scatter",
    "_REDUCE_SCATTER_BASE": "reduce_scatter", "REDUCE_SCATTER_TENSOR_COALESCED": "reduce_scatter",
    "ALLTOALL_BASE": "all_to_all", "ALLTOALL": "all_to_all", "SEND": "send", "RECV": "recv",
    "RECVANYSOURCE": "recv", "BARRIER": "barrier", "COALESCED": "coalesced",
    "_ALLREDUCE_SPARSE": "all_reduce", "UNKNOWN": "unknown",
}
#: the collectives RAS counts, in the order of ``collective_counts`` (``ncclFuncStr``)
RAS_COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
NCCL_COLLECTIVES = frozenset(k for k, v in _NCCL_OPS.items() if v not in ("send", "recv"))
_TORCH_TO_NCCL = {"all_reduce": "AllReduce", "all_gather": "AllGather",
                  "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast", "reduce": "Reduce",
                  "all_to_all": "AllToAll", "gather": "Gather", "scatter": "Scatter",
                  "send": "Send", "recv": "Recv"}


def comm_hash(value: object) -> int:
    """The communicator hash from any source's spelling of it.

    Raises:
        ValueError: ``value`` is none of the spellings (the message says which ones are).
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a communicator hash")
    if isinstance(value, int):
        h = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            if text[:2] in ("0x", "0X"):
                h = int(text[2:], 16)
            elif _HEX16.fullmatch(text):
                h = int(text, 16)      # RAS text: 16 zero-padded hex digits, no 0x
            elif text.isdigit():
                h = int(text)          # the example profiler: decimal
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"{value!r} is not a communicator hash (0x-prefixed hex, 16 hex "
                             "digits, or a decimal number)") from None
    else:
        raise ValueError(f"{value!r} is not a communicator hash")
    if not 0 <= h <= _MAX:
        raise ValueError(f"{value!r} does not fit in 64 bits: not a communicator hash")
    return h


def inspector_id(h: int) -> int:
    """The hash as the Inspector writes it: ``snprintf(buf, 17, "0x%lx")`` keeps 14 hex digits
    (``NCCL_COMM_HASH_LENGTH`` is 17 in the plugin's source)."""
    return int(f"{h:x}"[:INSPECTOR_HASH_DIGITS], 16)


def hash_text(h: int) -> str:
    """c4's spelling of a communicator hash: ``0x`` and 16 zero-padded hex digits."""
    return f"0x{h:016x}"


def op_name(name: str) -> str:
    """The trace format's op name for an NCCL, CoMMA, OTel or PyTorch spelling; a name none of
    them uses is returned in lower case."""
    if name in _NCCL_OPS:
        return _NCCL_OPS[name]
    if name in _TORCH_OPTYPES:
        return _TORCH_OPTYPES[name]
    if name.startswith("nccl") and name[4:] in _NCCL_OPS:
        return _NCCL_OPS[name[4:]]
    return name.lower()


def nccl_func(op: str) -> str:
    """NCCL's function name for a trace op name (``all_reduce`` -> ``AllReduce``)."""
    return _TORCH_TO_NCCL.get(op, op)


def is_p2p(op: str) -> bool:
    return op in ("send", "recv")


def bytes_from_msg(op: str, msg_bytes: int, nranks: int) -> int:
    """The trace's ``bytes`` (the rank's input) from NCCL's message size (count x type size):
    a ReduceScatter's count is the per-rank output chunk, so its input is ``nranks`` times as
    large; every other operation's count is its input."""
    return msg_bytes * max(nranks, 1) if op == "reduce_scatter" else msg_bytes


def msg_from_bytes(op: str, nbytes: int, nranks: int) -> int:
    """NCCL's message size for a trace ``bytes`` value (the inverse of :func:`bytes_from_msg`)."""
    return nbytes // max(nranks, 1) if op == "reduce_scatter" else nbytes
