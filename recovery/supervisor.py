"""``c4 launch``: run a torchrun job over a set of hosts, and when one of its hosts is isolated
(or the job fails) stop it, gracefully and then by force, and start it again on the healthy
hosts, replacing isolated ones with spares while there are any and otherwise shrinking the
world. The script resumes from its newest complete checkpoint (``recovery.checkpoint``).

Every step is recorded as a job event in the recovery journal (launched, stopping, stopped,
loaded, first_step, checkpoint, exited), from which the controller follows the recovery and the CLI
computes lost work and ETTR.

The local launcher starts one torchrun per host on this machine, each told its host id
(``C4_HOST``); on a cluster the same supervisor runs inside the scheduler's allocation.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from c4.processes import Service, free_port
from c4.settings import at_least, non_negative, positive, setting, validate
from recovery.errors import LaunchError
from recovery.isolation.api import Isolator
from recovery.journal import Journal
from recovery.launchers import Launcher, LocalLauncher, NodeSpec
from recovery.progress import ENV_PROGRESS, ProgressReader

log = logging.getLogger(__name__)

#: torchrun options the supervisor sets itself; given after ``--`` they are dropped.
MANAGED = {"--nnodes", "--node-rank", "--node_rank", "--nproc-per-node", "--nproc_per_node",
           "--master-addr", "--master_addr", "--master-port", "--master_port", "--rdzv-backend",
           "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id",
           "--standalone"}
_FLAGS = {"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path",
          "--run_path"}


def split_command(command: Sequence[str]) -> tuple[list[str], list[str]]:
    """(torchrun options to keep, script and its arguments) from ``torchrun [opts] script …``,
    ``python -m torch.distributed.run [opts] script …`` or just ``script …``."""
    cmd = list(command)
    if not cmd:
        raise LaunchError("no command: give the training script after --")
    if Path(cmd[0]).name == "torchrun":
        cmd = cmd[1:]
    elif len(cmd) >= 3 and cmd[1] == "-m" and cmd[2] == "torch.distributed.run":
        cmd = cmd[3:]
    keep: list[str] = []
    i = 0
    while i < len(cmd) and cmd[i].startswith("-"):
        opt = cmd[i]
        name = opt.split("=", 1)[0]
        takes_value = "=" not in opt and name not in _FLAGS
        if name in MANAGED:
            log.warning("c4 launch sets %s itself; ignoring the one given", name)
        else:
            keep.append(opt)
            if takes_value and i + 1 < len(cmd):
                keep.append(cmd[i + 1])
        i += 2 if takes_value else 1
    if i >= len(cmd):
        raise LaunchError(f"no training script in {' '.join(command)!r}")
    return keep, cmd[i:]


def _host_names(text: str) -> tuple[str, ...]:
    return tuple(filter(None, (h.strip() for h in str(text).split(","))))


def parse_sidecars(text: str) -> dict[str, str]:
    """``PATH`` (every host's ranks) or ``HOST=PATH,HOST=PATH`` -> {host or "*": path}."""
    socks: dict[str, str] = {}
    for part in filter(None, str(text).split(",")):
        host, eq, path = part.partition("=")
        socks.update({host: path} if eq else {"*": part})
    return socks


@dataclass(frozen=True)
class LaunchConfig:
    """How ``c4 launch`` runs a job. Each field with a flag carries its ``c4 launch`` option,
    environment variable, help and range (``c4.settings``); the command's options are derived
    from them."""

    #: torchrun's options and the training script with its arguments (``c4 launch -- ...``)
    command: tuple[str, ...]
    job: str = setting(flag="--job", env="C4_JOB", help="The job's name.")
    hosts: tuple[str, ...] = setting(flag="--hosts", env="C4_LAUNCH_HOSTS", cli_type=str,
                                     parse=_host_names,
                                     help="Host ids to run on, comma-separated.")
    workdir: Path = setting(Path("c4-launch"), flag="--workdir", env="C4_LAUNCH_WORKDIR",
                            help="Logs and progress files go here.")
    spares: tuple[str, ...] = setting((), flag="--spares", env="C4_LAUNCH_SPARES",
                                      cli_type=str, parse=_host_names, to_cli=",".join,
                                      help="Hosts that replace isolated ones, comma-separated.")
    nproc_per_node: int = setting(1, flag="--nproc-per-node", env="C4_LAUNCH_NPROC_PER_NODE",
                                  check=at_least(1), help="Ranks per host.")
    #: below this many hosts left the supervisor gives up
    min_hosts: int = setting(1, flag="--min-hosts", env="C4_LAUNCH_MIN_HOSTS",
                             help="Give up below this many hosts.")
    grace_s: float = setting(10.0, flag="--grace", env="C4_LAUNCH_GRACE", check=non_negative,
                             help="Seconds from SIGTERM to SIGKILL when the job is stopped.")
    #: a crashed rank, say
    max_failures: int = setting(2, flag="--max-failures", env="C4_LAUNCH_MAX_FAILURES",
                                check=non_negative,
                                help="Restarts after failures no isolation explains.")
    poll_s: float = setting(0.2, check=positive)
    #: cheap for the blocklist; raise it for backends that ask a scheduler
    isolation_poll_s: float = setting(0.2, flag="--isolation-poll",
                                      env="C4_LAUNCH_ISOLATION_POLL", check=positive,
                                      help="Seconds between checks of the isolated nodes.")
    env: Mapping[str, str] = field(default_factory=dict)
    #: Sidecar socket per host (``C4_SIDECAR_SOCKET`` of its ranks); "*" applies to all.
    sidecars: Mapping[str, str] = setting(
        default_factory=dict, flag="--sidecar-socket", env="C4_LAUNCH_SIDECAR_SOCKET",
        cli_type=str, parse=parse_sidecars,
        help="Sidecar socket for every host's ranks, or HOST=PATH,HOST=PATH (default: none, "
             "the ranks' own C4_SIDECAR_SOCKET or the default socket).")
    #: Starts one host's torchrun (default: on this machine, see recovery.launchers).
    launcher: Launcher = field(default_factory=LocalLauncher)

    def __post_init__(self) -> None:
        if not self.hosts:
            raise LaunchError("no hosts: give --hosts")
        validate(self, LaunchError)
        if len(set(self.hosts) | set(self.spares)) != len(self.hosts) + len(self.spares):
            raise LaunchError(f"hosts and spares repeat a name: {self.hosts} {self.spares}")
        if not 1 <= self.min_hosts <= len(self.hosts):
            raise LaunchError(f"--min-hosts ({self.min_hosts}) must be between 1 and the "
                              f"number of --hosts ({len(self.hosts)})")


class Supervisor:
    def __init__(self, config: LaunchConfig, isolator: Isolator, journal: Journal) -> None:
        self.cfg = config
        self.isolator = isolator
        self.journal = journal
        # a supervisor started again for the same job (a scheduler requeued it) continues the
        # attempt numbers, so that the daemon keeps the attempts apart
        launched = [e.attempt for e in journal.events(config.job) if e.kind == "launched"]
        self.attempt = max(launched) + 1 if launched else 0
        self.hosts: list[str] = []
        self._next_isolation_check = 0.0
        self._procs: list[Service] = []
        self._stop = threading.Event()
        self._torchrun_opts, self._script = split_command(config.command)
        config.workdir.mkdir(parents=True, exist_ok=True)

    # ----- choosing hosts ----------------------------------------------------------------------
    def choose_hosts(self, blocked: set[str]) -> list[str]:
        """The configured hosts that are not blocked, topped up with free spares to the
        configured count."""
        chosen = [h for h in self.cfg.hosts if h not in blocked]
        spares = [h for h in self.cfg.spares if h not in blocked]
        while len(chosen) < len(self.cfg.hosts) and spares:
            chosen.append(spares.pop(0))
        if len(chosen) < self.cfg.min_hosts:
            raise LaunchError(f"only {len(chosen)} healthy host(s) left ({', '.join(chosen)}), "
                              f"fewer than --min-hosts {self.cfg.min_hosts}; release repaired "
                              "nodes with `c4 nodes release NODE` or add spares")
        return chosen

    # ----- processes ---------------------------------------------------------------------------
    def progress_path(self, attempt: int) -> Path:
        return self.cfg.workdir / f"{self.cfg.job}-progress-{attempt}.jsonl"

    def _launch(self) -> ProgressReader:
        self.hosts = self.choose_hosts(set(self.isolator.isolated()))
        port = free_port()
        progress = self.progress_path(self.attempt)
        progress.unlink(missing_ok=True)
        nnodes = len(self.hosts)
        self._procs = []
        for i, host in enumerate(self.hosts):
            args, launch_env = self.cfg.launcher.node(NodeSpec(
                host=host, node_rank=i, nnodes=nnodes, nproc_per_node=self.cfg.nproc_per_node,
                master_host=self.hosts[0], master_port=port,
                torchrun_options=self._torchrun_opts, script=self._script))
            env = {"C4_HOST": host, "C4_JOB": self.cfg.job, "C4_ATTEMPT": str(self.attempt),
                   ENV_PROGRESS: str(progress), "OMP_NUM_THREADS": "1", **launch_env,
                   **self.cfg.env}
            sock = self.cfg.sidecars.get(host) or self.cfg.sidecars.get("*")
            if sock:
                env["C4_SIDECAR_SOCKET"] = sock
            log_path = self.cfg.workdir / f"{self.cfg.job}-{self.attempt}-{host}.log"
            self._procs.append(Service(args, log_path, env=env).start())
        self.journal.add_event(self.cfg.job, "launched", attempt=self.attempt, data={
            "hosts": self.hosts, "world_size": nnodes * self.cfg.nproc_per_node})
        log.info("job %s attempt %d on %s", self.cfg.job, self.attempt, ", ".join(self.hosts))
        return ProgressReader(progress)

    def _stop_job(self, reason: str, reader: ProgressReader) -> None:
        self._drain(reader)
        self.journal.add_event(self.cfg.job, "stopping", attempt=self.attempt,
                               step=reader.last_step, data={"reason": reason})
        for p in self._procs:
            if p.running():
                p._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.cfg.grace_s
        while any(p.running() for p in self._procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        forced = [p for p in self._procs if p.running()]
        for p in self._procs:
            p.stop(signal.SIGKILL, timeout=10)  # reaps, and kills strays in the group
        self._drain(reader)
        self.journal.add_event(self.cfg.job, "stopped", attempt=self.attempt,
                               step=reader.last_step, data={"forced": len(forced)})

    def _drain(self, reader: ProgressReader) -> None:
        first_seen = reader.first_step is not None
        for rec in reader.poll():
            if rec["event"] == "step" and not first_seen:
                first_seen = True
                self.journal.add_event(self.cfg.job, "first_step", attempt=self.attempt,
                                       step=rec["step"], t_ns=rec["t_ns"],
                                       data={k: v for k, v in rec.items()
                                             if k not in ("event", "step", "t_ns")})
            elif rec["event"] == "loaded":
                self.journal.add_event(self.cfg.job, "loaded", attempt=self.attempt,
                                       step=rec["step"], t_ns=rec["t_ns"],
                                       data={"load_s": rec["load_s"]})
            elif rec["event"] == "checkpoint":
                self.journal.add_event(self.cfg.job, "checkpoint", attempt=self.attempt,
                                       step=rec["step"], t_ns=rec["t_ns"],
                                       data={"saved_ns": rec["saved_ns"], "path": rec["path"]})

    # ----- the loop ----------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        """Run until the job succeeds (0), fails for good (its exit code) or is stopped."""
        failures = 0
        while True:
            try:
                reader = self._launch()
            except LaunchError as exc:
                self.journal.add_event(self.cfg.job, "exited", attempt=self.attempt,
                                       data={"rc": 1, "reason": str(exc)})
                raise
            rc = self._watch(reader)
            if rc == 0:
                self.journal.add_event(self.cfg.job, "exited", attempt=self.attempt,
                                       step=reader.last_step, data={"rc": 0})
                return 0
            if rc is None:       # stopped by request
                self.journal.add_event(self.cfg.job, "exited", attempt=self.attempt,
                                       step=reader.last_step, data={"rc": 143})
                return 143
            if rc > 0:           # a failure no isolation explains
                failures += 1
                if failures > self.cfg.max_failures:
                    self.journal.add_event(self.cfg.job, "exited", attempt=self.attempt,
                                           step=reader.last_step, data={"rc": rc})
                    log.error("job %s failed %d times; giving up", self.cfg.job, failures)
                    return rc
            self.attempt += 1

    def _isolated_hosts(self) -> list[str]:
        now = time.monotonic()
        if now < self._next_isolation_check:
            return []
        self._next_isolation_check = now + self.cfg.isolation_poll_s
        return sorted(set(self.hosts) & set(self.isolator.isolated()))

    def _watch(self, reader: ProgressReader) -> int | None:
        """0 when every host's torchrun succeeded, -1 after a stop for isolation, the exit
        code of a failure, None when asked to stop."""
        while True:
            self._drain(reader)
            if self._stop.is_set():
                self._stop_job("the supervisor was asked to stop", reader)
                return None
            bad = self._isolated_hosts()
            if bad:
                self._stop_job(f"isolated: {', '.join(bad)}", reader)
                return -1
            codes = [p.proc.poll() if p.proc else 0 for p in self._procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                code = failed[0] if failed[0] > 0 else 128 - failed[0]  # killed by a signal
                self._stop_job(f"a torchrun exited with {code}", reader)
                return code
            if all(c == 0 for c in codes):
                self._drain(reader)
                return 0
            self._stop.wait(self.cfg.poll_s)
