"""The torch.distributed (gloo) probe: the same :class:`~diagnosis.probes.api.Prober` interface
as the nccl-tests wrapper, for clusters without GPUs and for the lab. Each rank is a process
running ``gloo_worker.py`` behind its host's prefix (``ip netns exec NS`` in the lab, nothing on
this machine); torch is imported only in those processes."""

from __future__ import annotations

import json
import logging
import random
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from c4.settings import at_least, non_negative, positive, setting, validate
from diagnosis.errors import ConfigError
from diagnosis.probes.api import GROUP_OP, PAIR_OP, ProbeError, ProbeHost, ProbeResult, bus_factor
from diagnosis.probes.procs import run_all

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("gloo_worker.py")


@dataclass(frozen=True)
class GlooConfig:
    #: Message size of each iteration (one float32 at least).
    size_bytes: int = setting(4 << 20, check=at_least(4))
    iters: int = setting(5, check=at_least(1))
    warmup: int = setting(1, check=non_negative)
    #: For the whole probe, process start-up (importing torch: ~2 s) included.
    timeout_s: float = setting(60.0, check=positive)
    #: Python that runs the workers (must have torch).
    python: str = sys.executable

    def __post_init__(self) -> None:
        validate(self, ConfigError)


class GlooProber:
    """Point-to-point and all-reduce bandwidth among hosts with torch.distributed gloo."""

    name = "gloo"

    def __init__(self, config: GlooConfig | None = None) -> None:
        self.cfg = config or GlooConfig()

    def pair(self, a: ProbeHost, b: ProbeHost) -> ProbeResult:
        return self._run(PAIR_OP, [a, b])

    def group(self, hosts: list[ProbeHost]) -> ProbeResult:
        return self._run(GROUP_OP, hosts)

    def _run(self, op: str, hosts: list[ProbeHost]) -> ProbeResult:
        if len(hosts) < 2:
            raise ProbeError(f"a {op} probe needs at least two hosts, got {len(hosts)}")
        ids = tuple(h.id for h in hosts)
        if len(set(ids)) != len(ids):
            raise ProbeError(f"a host appears twice in {', '.join(ids)}")
        ranks = [h for h in hosts for _ in range(max(1, h.ranks))]
        cfg = self.cfg
        for _ in range(_PORT_TRIES):
            master = f"{hosts[0].addr}:{_port(hosts[0])}"
            cmds, envs = [], []
            for r, h in enumerate(ranks):
                cmds.append([*h.prefix, cfg.python, str(WORKER), "--rank", str(r), "--world",
                             str(len(ranks)), "--master", master, "--op", op, "--bytes",
                             str(cfg.size_bytes), "--iters", str(cfg.iters), "--warmup",
                             str(cfg.warmup), "--timeout", str(cfg.timeout_s)])
                envs.append({"OMP_NUM_THREADS": "1", **h.env})
            out = run_all(cmds, cfg.timeout_s, envs)
            # a port guessed for another namespace or host may be taken there: guess again
            if out.ok or "address already in use" not in out.failure().lower():
                break
            log.info("gloo %s probe: the store port of %s was taken; retrying", op, master)
        if not out.ok:
            log.info("gloo %s probe among %s failed: %s", op, ", ".join(ids), out.failure())
            return ProbeResult(op, ids, self.name, False, cfg.size_bytes, seconds=out.seconds,
                               error=out.failure())
        try:
            got = json.loads(out.procs[0].stdout.strip().splitlines()[-1])
            per_iter = float(got["seconds_per_iter"])
        except (IndexError, ValueError, KeyError) as exc:
            return ProbeResult(op, ids, self.name, False, cfg.size_bytes, seconds=out.seconds,
                               error=f"rank 0 printed no result ({exc}): "
                                     f"{out.procs[0].stdout[-300:]!r}")
        algbw = got["bytes"] / per_iter / 1e9 if per_iter > 0 else 0.0
        return ProbeResult(
            op, ids, self.name, True, int(got["bytes"]), algbw,
            algbw * bus_factor(op, len(ranks)), out.seconds,
            detail={"seconds_per_iter": per_iter, "iters": cfg.iters, "ranks": len(ranks),
                    "rank_seconds": got.get("rank_seconds", [])})


_PORT_TRIES = 3
# not the global generator, which a caller may have seeded: two probes would guess alike
_RANDOM = random.Random()


def _port(master: ProbeHost) -> int:
    """A port for rank 0's store: a free one when rank 0 runs on this machine, else a random
    high one (a fresh namespace or a remote host; collisions are unlikely and fail fast)."""
    if not master.prefix:
        with socket.socket() as s:
            s.bind((master.addr, 0))
            return s.getsockname()[1]
    return _RANDOM.randint(40000, 49999)
