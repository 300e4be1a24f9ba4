"""Which GPU a rank drives, as its host numbers them, for the daemon to place the rank on the
host's discovered GPUs and the NIC each uses (instead of ``C4_GPU``/``C4_NIC`` set by hand)."""

from __future__ import annotations

import os
from typing import Any


def cuda_device(local_rank: int, environ: dict[str, str] | None = None,
                torch_cuda: Any = None) -> str:
    """The rank's entry of ``CUDA_VISIBLE_DEVICES`` (an index as ``nvidia-smi`` numbers GPUs,
    or a UUID/MIG id): at the device CUDA is using once initialized, else at ``local_rank``
    (launchers give each local rank the device of its number). Without the variable, the
    device index itself when CUDA is there. Empty: no GPU is known (a CPU job)."""
    env = os.environ if environ is None else environ
    cuda = torch_cuda if torch_cuda is not None else _torch_cuda()
    index: int | None = None
    available = False
    if cuda is not None:
        try:
            available = bool(cuda.is_available())
            if available and cuda.is_initialized():
                index = int(cuda.current_device())
        except Exception:   # a broken driver must not stop the rank from registering
            available = False
    if index is None and local_rank >= 0:
        index = local_rank
    if index is None:
        return ""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index) if available else ""
    # CUDA ignores the list from its first invalid entry on; "-1" or "" hides every GPU
    entries = [e.strip() for e in visible.split(",")]
    usable = []
    for e in entries:
        if not e or e.startswith("-"):
            break
        usable.append(e)
    return usable[index] if index < len(usable) else ""


def _torch_cuda() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda
