"""The settings of ``c4 probe``, declared once: which backend measures and how (the options
every probe command takes), and how a plan judges what it measured (``PlanConfig``'s
``--slow-ratio``). Each field carries its flag, ``C4_PROBE_*`` environment variable, help and
range (``c4.settings``); the commands' options are derived from them. A measurement setting
left out keeps its backend's default (``GlooConfig``, ``NcclTestsConfig``), which the help
shows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from c4.settings import Check, at_least, one_of, setting, validate
from diagnosis.errors import ConfigError
from diagnosis.probes.api import Prober
from diagnosis.probes.gloo import GlooConfig
from diagnosis.probes.nccl_runner import LAUNCHERS, NcclTestsConfig
from diagnosis.probes.plans import PlanConfig

BACKENDS = ("gloo", "nccl-tests")


def _unset_or(check: Check) -> Check:
    return lambda v: None if v is None else check(v)


def _mib(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB"


@dataclass(frozen=True)
class ProbeSettings:
    """What every ``c4 probe`` command measures with, and where its hosts are."""

    backend: str = setting("gloo", flag="--backend", env="C4_PROBE_BACKEND",
                           check=one_of(BACKENDS),
                           help="'gloo' (torch.distributed, CPU) or 'nccl-tests' (GPU "
                                "clusters).")
    size_bytes: int | None = setting(
        None, flag="--bytes", env="C4_PROBE_BYTES", check=_unset_or(at_least(1)),
        help=f"Message size in bytes (default {_mib(GlooConfig.size_bytes)} for gloo, "
             f"{_mib(NcclTestsConfig.size_bytes)} for nccl-tests).")
    iters: int | None = setting(
        None, flag="--iters", env="C4_PROBE_ITERS", check=_unset_or(at_least(1)),
        help=f"Timed iterations per probe (default {GlooConfig.iters} for gloo, "
             f"{NcclTestsConfig.iters} for nccl-tests).")
    timeout_s: float | None = setting(
        None, flag="--timeout", env="C4_PROBE_TIMEOUT", check=_unset_or(at_least(1e-3)),
        help=f"Seconds for one probe, start-up included (default {GlooConfig.timeout_s:g} for "
             f"gloo, {NcclTestsConfig.timeout_s:g} for nccl-tests).")
    launcher: str = setting(NcclTestsConfig.launcher, flag="--launcher",
                            env="C4_PROBE_LAUNCHER", check=one_of(LAUNCHERS),
                            help="nccl-tests: 'mpirun', 'srun' or 'local'.")
    nccl_tests_dir: str = setting(NcclTestsConfig.bin_dir, flag="--nccl-tests-dir",
                                  env="C4_PROBE_NCCL_TESTS_DIR",
                                  help="nccl-tests build directory (default: PATH).")
    gpus_per_host: int = setting(1, flag="--gpus-per-host", env="C4_PROBE_GPUS_PER_HOST",
                                 check=at_least(1),
                                 help="Ranks per host (nccl-tests: GPUs).")
    lab_dir: Path | None = setting(None, flag="--lab-dir", env="C4_LAB_DIR",
                                   help="Lab directory whose host ids may be named (default: "
                                        "the lab's default directory, if a lab is up).")
    topology: Path | None = setting(None, flag="--topology", env="C4_PROBE_TOPOLOGY",
                                    help="Topology JSON: compare with what the links allow "
                                         "(default: the lab's topology).")
    remote: str = setting("", flag="--remote", env="C4_PROBE_REMOTE",
                          help="Command that runs a probe rank on another machine, the "
                               "address appended (e.g. 'ssh').")

    def __post_init__(self) -> None:
        validate(self, ConfigError)

    def prober(self) -> Prober:
        """The backend's prober, with the measurement settings given and its own defaults
        for the rest."""
        measure = {"size_bytes": self.size_bytes, "iters": self.iters,
                   "timeout_s": self.timeout_s}
        given: dict[str, Any] = {k: v for k, v in measure.items() if v is not None}
        if self.backend == "gloo":
            from diagnosis.probes.gloo import GlooProber

            return GlooProber(GlooConfig(**given))
        from diagnosis.probes.nccl_runner import NcclTestsProber

        return NcclTestsProber(NcclTestsConfig(launcher=self.launcher,
                                               bin_dir=self.nccl_tests_dir, **given))


@dataclass(frozen=True)
class PlanProbeSettings(ProbeSettings):
    """A plan's probes (``c4 probe bisect`` and ``confirm``): the measurement, and how what
    it measured is judged."""

    plan: PlanConfig = setting(default_factory=PlanConfig)
