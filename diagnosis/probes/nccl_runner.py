"""Running the nccl-tests binaries as probes: one command under the launcher the cluster uses
(``mpirun``, ``srun``, or ``local``: one process on this host driving its GPUs), with a
deadline, its output read by :func:`~diagnosis.probes.nccl_tests.parse_nccl_tests`.

nccl-tests exits non-zero on NCCL errors and prints ``#wrong`` counts and a bandwidth check
footer; a run that times out, exits non-zero or prints a failed footer is a failed
:class:`~diagnosis.probes.api.ProbeResult` (evidence), a binary that is not there a
:class:`~diagnosis.probes.api.ProbeError`."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from c4.errors import FormatError
from c4.settings import at_least, non_negative, one_of, positive, setting, validate
from diagnosis.errors import ConfigError
from diagnosis.probes.api import GROUP_OP, PAIR_OP, ProbeError, ProbeHost, ProbeResult
from diagnosis.probes.nccl_tests import parse_nccl_tests
from diagnosis.probes.nccl_tests_records import NcclTestsRun
from diagnosis.probes.procs import run_all

log = logging.getLogger(__name__)

BINARIES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
            "reduce_scatter": "reduce_scatter_perf", "alltoall": "alltoall_perf",
            "sendrecv": "sendrecv_perf"}
LAUNCHERS = ("mpirun", "srun", "local")


@dataclass(frozen=True)
class NcclTestsConfig:
    launcher: str = setting("mpirun", check=one_of(LAUNCHERS))
    #: Directory of the nccl-tests binaries (``build/``); empty: look them up on PATH.
    bin_dir: str = ""
    #: Message size: one size per run (``-b`` = ``-e``), large enough to be bandwidth-bound.
    size_bytes: int = setting(256 << 20, check=at_least(1))
    iters: int = setting(20, check=at_least(1))
    warmup: int = setting(5, check=non_negative)
    timeout_s: float = setting(300.0, check=positive)
    #: Extra launcher arguments (``--mca btl_tcp_if_include eth0``, ``--mpi=pmix``).
    launcher_args: tuple[str, ...] = ()
    #: The launcher program itself, when it is not on PATH under its own name.
    launcher_path: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate(self, ConfigError)


class NcclTestsProber:
    """The :class:`~diagnosis.probes.api.Prober` of clusters with GPUs: sendrecv_perf between
    two hosts, all_reduce_perf among a group (``run`` takes any of the five binaries)."""

    name = "nccl-tests"

    def __init__(self, config: NcclTestsConfig | None = None) -> None:
        self.cfg = config or NcclTestsConfig()

    def pair(self, a: ProbeHost, b: ProbeHost) -> ProbeResult:
        return self.run(PAIR_OP, [a, b])

    def group(self, hosts: list[ProbeHost]) -> ProbeResult:
        return self.run(GROUP_OP, hosts)

    def command(self, op: str, hosts: Sequence[ProbeHost]) -> list[str]:
        """The command line that runs ``op`` among ``hosts`` (one rank per GPU)."""
        cfg = self.cfg
        binary = self._binary(op)
        size = str(cfg.size_bytes)
        test = ["-b", size, "-e", size, "-n", str(cfg.iters), "-w", str(cfg.warmup)]
        launcher = cfg.launcher_path or cfg.launcher
        if cfg.launcher == "local":
            if len(hosts) != 1:
                raise ProbeError(f"the local launcher runs on this host only; {len(hosts)} hosts "
                                 "need mpirun or srun")
            return [binary, *test, "-g", str(max(1, hosts[0].ranks))]
        total = sum(max(1, h.ranks) for h in hosts)
        if cfg.launcher == "mpirun":
            where = ",".join(f"{h.id}:{max(1, h.ranks)}" for h in hosts)
            exports = [a for k in sorted(cfg.env) for a in ("-x", k)]
            return [launcher, "-np", str(total), "-H", where, "--tag-output", *exports,
                    *cfg.launcher_args, binary, *test, "-g", "1"]
        per_node = {max(1, h.ranks) for h in hosts}
        if len(per_node) != 1:
            raise ProbeError("srun starts the same number of tasks on every node: give every "
                             "host the same number of GPUs")
        return [launcher, "-l", "-N", str(len(hosts)), f"--ntasks-per-node={per_node.pop()}",
                f"--nodelist={','.join(h.id for h in hosts)}", *cfg.launcher_args, binary,
                *test, "-g", "1"]

    def run(self, op: str, hosts: Sequence[ProbeHost]) -> ProbeResult:
        """Run one nccl-tests binary; a failed run is a result with ``ok`` false.

        Raises:
            ProbeError: the binary or the launcher is missing, or the hosts do not suit it.
        """
        ids = tuple(h.id for h in hosts)
        cmd = self.command(op, hosts)
        if shutil.which(cmd[0]) is None:
            raise ProbeError(f"{cmd[0]!r} not found: install it or pass its path")
        out = run_all([cmd], self.cfg.timeout_s, [self.cfg.env])
        text = out.procs[0].stdout
        try:
            runs = parse_nccl_tests(text, source=os.path.basename(cmd[0]))
        except FormatError as exc:
            runs, parse_error = [], str(exc)
        else:
            parse_error = ""
        if not out.ok:
            return ProbeResult(op, ids, self.name, False, self.cfg.size_bytes,
                               seconds=out.seconds, error=out.failure(),
                               detail=_detail(runs[-1]) if runs else {})
        if not runs:
            return ProbeResult(op, ids, self.name, False, self.cfg.size_bytes,
                               seconds=out.seconds, error=parse_error)
        return result_of_run(op, ids, runs[-1], out.seconds)

    def _binary(self, op: str) -> str:
        name = BINARIES.get(op, op)
        if name not in BINARIES.values():
            raise ProbeError(f"unknown nccl-tests operation {op!r}; one of "
                             f"{', '.join(BINARIES)}")
        if self.cfg.bin_dir:
            path = Path(self.cfg.bin_dir) / name
            if not path.is_file():
                raise ProbeError(f"{name} is not in {self.cfg.bin_dir}: build nccl-tests "
                                 "(make MPI=1) or point the probe at its build directory")
            return str(path)
        found = shutil.which(name)
        if found is None:
            raise ProbeError(f"{name} is not on PATH: build nccl-tests and pass its build "
                             "directory")
        return found


def result_of_run(op: str, hosts: tuple[str, ...], run: NcclTestsRun,
                  seconds: float = 0.0) -> ProbeResult:
    """A probe result from a parsed run: the bandwidth of its largest size."""
    if not run.results:
        return ProbeResult(op, hosts, NcclTestsProber.name, False, seconds=seconds,
                           error="; ".join(run.errors) or "the run printed no result line",
                           detail=_detail(run))
    last = max(run.results, key=lambda r: r.size_bytes)
    ms = [m for m in (last.out_of_place, last.in_place) if m is not None]
    best = max(ms, key=lambda m: m.busbw_GBps)
    why = []
    if run.failed:
        why.append(f"nccl-tests reported a failure (wrong {run.wrong:g}, out of bounds "
                   f"{run.out_of_bounds}, errors: {'; '.join(run.errors) or 'none'})")
    if not run.complete:
        why.append("the output ends before the footer: the run was cut short")
    return ProbeResult(op, hosts, NcclTestsProber.name, not why, last.size_bytes,
                       best.algbw_GBps, best.busbw_GBps, seconds, "; ".join(why),
                       detail=_detail(run))


def _detail(run: NcclTestsRun) -> dict[str, object]:
    return {"test": run.test, "ranks": run.ranks, "hosts": list(run.hosts),
            "avg_busbw_GBps": run.avg_busbw_GBps, "sizes": len(run.results)}
