"""How the simulated job looks to NCCL: a process id per rank, an address per host, a hash per
communicator. Deterministic, so that the Inspector files and the RAS reports of one run agree
with each other as NCCL's would."""

from __future__ import annotations

import hashlib

from diagnosis.sim.layout import Layout

PID_BASE = 20_000


def pid_of(rank: int) -> int:
    """Ranks' processes are started in rank order: pids ascend with the rank on each host."""
    return PID_BASE + 7 * rank


def address_of(host_index: int) -> str:
    """The node's address as RAS prints it (its out-of-band interface)."""
    return f"10.{(host_index >> 16) & 255}.{(host_index >> 8) & 255}.{host_index & 255}"


def comm_hash(job: str, seed: int, pg: str) -> int:
    """A 64-bit communicator hash, as ``comm->commHash`` would be (a new one per job)."""
    digest = hashlib.blake2b(f"{job}:{seed}:{pg}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def local_index(lay: Layout) -> list[int]:
    """Each rank's place among its host's ranks (its CUDA device)."""
    seen: dict[int, int] = {}
    out = []
    for h in lay.host_of.tolist():
        out.append(seen.get(h, 0))
        seen[h] = out[-1] + 1
    return out
