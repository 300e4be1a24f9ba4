"""What to simulate: the job's shape, its timing model, its noise, and the faults to inject."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from c4.settings import setting
from c4.topology.fabrics import FABRICS, RAIL_FABRICS
from diagnosis.errors import DiagnosisError


class SimError(DiagnosisError):
    """A simulation that cannot be set up as asked; the message names the bad option."""


@dataclass(frozen=True)
class FaultKind:
    """A fault the simulator can inject: what component it strikes and what report it calls for."""

    name: str
    component: str     # topology node kind (gpu, host, nic, link, switch)
    report: str        # the report kind (shared specs section 3) a detector should file
    slows: bool        # takes a ``slow`` factor


FAULT_KINDS: dict[str, FaultKind] = {k.name: k for k in (
    FaultKind("slow_gpu", "gpu", "noncomm_slow", True),
    FaultKind("slow_host", "host", "noncomm_slow", True),
    FaultKind("slow_nic", "nic", "comm_slow", True),
    FaultKind("dead_nic", "nic", "comm_hang", False),
    FaultKind("slow_link", "link", "comm_slow", True),
    FaultKind("dead_link", "link", "comm_hang", False),
    FaultKind("slow_switch", "switch", "comm_slow", True),
    # a switch stops forwarding (power, ASIC, a crashed OS): every transfer crossing it stalls
    FaultKind("dead_switch", "switch", "comm_hang", False),
    # a rank stops computing: it never enters its next operation
    FaultKind("rank_hang", "gpu", "noncomm_hang", False),
    # a rank's transport stalls: its outgoing transfer in a data-parallel all-reduce never
    # completes although every member entered (a stuck proxy or queue pair, no link fault)
    FaultKind("comm_hang", "gpu", "comm_hang", False),
    # a rank's operation fails (status error) and the rank exits; its peers wait for ever
    FaultKind("error", "gpu", "error", False),
)}

# Target keywords besides "auto": pick a random component of one sort, seeded.
TARGET_KEYWORDS = {
    "link": ("auto", "cable", "uplink"),   # cable: nic~switch, uplink: any switch~switch
    "switch": ("auto", "leaf", "spine", "core"),   # by the switch's tier
}


@dataclass(frozen=True)
class FaultSpec:
    """One injected fault, as given on the command line.

    ``KIND[:TARGET][@ONSET][,slow=F][,end=I][,every=K,on=J][,duty=P]``: TARGET is ``auto`` (a random
    component of the right kind that carries the job's traffic), a keyword (``cable``, ``uplink``
    for links; ``leaf``, ``spine``, ``core`` for switches), a topology id, or for GPU faults a
    rank number.
    ONSET and END are iteration numbers (the fault is active in iterations ONSET .. END-1);
    ``slow`` multiplies compute time or divides bandwidth; ``every``/``on`` make it intermittent
    (active ``on`` iterations out of every ``every``, starting at ONSET); ``duty`` makes a slow
    fault active at random, in each iteration from ONSET on with probability ``duty`` (always
    in ONSET itself; seeded, see :mod:`diagnosis.sim.faults`).
    """

    kind: str
    target: str = "auto"
    onset: int | None = None
    end: int | None = None
    slow: float = 2.0
    every: int = 0
    on: int = 0
    duty: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise SimError(f"unknown fault kind {self.kind!r}; choose one of "
                           f"{', '.join(FAULT_KINDS)}")
        if not self.slow >= 1.0:
            raise SimError(f"fault {self.kind}: slow={self.slow} must be >= 1 (a time multiplier)")
        if self.every < 0 or self.on < 0 or (self.every and not 0 < self.on <= self.every):
            raise SimError(f"fault {self.kind}: intermittent needs 0 < on <= every, got "
                           f"every={self.every} on={self.on}")
        if self.duty and not (0.0 < self.duty <= 1.0 and self.info.slows and not self.every):
            raise SimError(f"fault {self.kind}: duty={self.duty} needs a slow fault, 0 < duty "
                           "<= 1 and no every=/on=")
        if self.onset is not None and self.onset < 0:
            raise SimError(f"fault {self.kind}: onset {self.onset} is negative")
        if self.end is not None and self.onset is not None and self.end <= self.onset:
            raise SimError(f"fault {self.kind}: end {self.end} is not after onset {self.onset}")

    @property
    def info(self) -> FaultKind:
        return FAULT_KINDS[self.kind]

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        head, *opts = text.strip().split(",")
        onset: int | None = None
        if "@" in head:
            head, at = head.split("@", 1)
            onset = _int(at, text, "onset")
        kind, _, target = head.partition(":")
        kind = kind.replace("-", "_")  # `c4 lab inject` spells them slow-link, slow-gpu, ...
        kw: dict[str, Any] = {}
        for opt in opts:
            key, sep, value = opt.partition("=")
            if not sep or key not in ("slow", "end", "every", "on", "duty"):
                raise SimError(f"fault {text!r}: option {opt!r} is not one of slow=, end=, "
                               "every=, on=, duty=")
            kw[key] = _float(value, text, key) if key in ("slow", "duty") \
                else _int(value, text, key)
        return cls(kind=kind, target=target or "auto", onset=onset, **kw)

    def active(self, iteration: int, onset: int) -> bool:
        if iteration < onset or (self.end is not None and iteration >= self.end):
            return False
        return not self.every or (iteration - onset) % self.every < self.on


SPEC_FORM = "KIND[:TARGET][@ONSET][,slow=F][,end=I][,every=K,on=J][,duty=P]"


def _int(value: str, text: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise SimError(f"fault {text!r}: {what} {value!r} is not an integer; a fault is "
                       f"{SPEC_FORM}") from None


def _float(value: str, text: str, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise SimError(f"fault {text!r}: {what} {value!r} is not a number; a fault is "
                       f"{SPEC_FORM}, e.g. slow_gpu:auto@10,slow=2.0,end=20") from None


@dataclass(frozen=True)
class SimConfig:
    """A simulated training job. Times are milliseconds, sizes bytes, unless named otherwise."""

    gpus: int = setting(512, flag="--gpus", help="World size (GPUs, one rank each).")
    gpus_per_host: int = setting(8, flag="--gpus-per-host", help="GPUs per host.")
    tp: int = setting(8, flag="--tp", help="Tensor-parallel size (inside a host).")
    pp: int = setting(4, flag="--pp", help="Pipeline stages (across hosts).")
    iterations: int = setting(40, flag="--iterations", help="Training iterations to simulate.")
    microbatches: int = setting(4, flag="--microbatches",
                                help="Microbatches per iteration (pipeline).")
    #: (the per-layer calls: diagnosis.sim.layers)
    layers: int = setting(1, flag="--layers",
                          help="Transformer layers per pipeline stage: 1, one tensor-parallel "
                               "all-reduce per pass; N > 1, a sequence-parallel all-gather and "
                               "reduce-scatter per block, two blocks per layer (16: a few "
                               "hundred calls/s per rank).")
    seed: int = setting(0, flag="--seed",
                        help="Seed: the same options and seed give the same files.")
    conns: bool = setting(True, flag="--conns/--no-conns",
                          help="Emit conn records (one per transfer per connection).")
    #: the reduced trace is diagnosis.sim.reduced's; None: version 1, every call
    sample: int | None = setting(None, flag="--sample", cli_type=int,
                                 parse=lambda k: k or None, to_cli=lambda k: k or 0,
                                 help="Write the reduced trace of format version 2, as the "
                                      "edge ships it: calls sampled 1 in K, progress, linkstat "
                                      "instead of conn, NIC port records (0: version 1, every "
                                      "call).")
    window_ms: float = setting(1000.0, flag="--window-ms",
                               help="Window of the reduced trace's progress and linkstat "
                                    "records (with --sample).")
    #: without paths the analyzer has the topology's candidates only
    paths: bool = setting(True, flag="--paths/--no-paths",
                          help="Give each conn record the route it took (without: as "
                               "collectors that cannot see the ECMP path of a flow).")
    faults: tuple[FaultSpec, ...] = setting(
        (), flag="--fault", cli_type=list[str], to_cli=list,
        parse=lambda specs: tuple(FaultSpec.parse(f) for f in specs),
        help=f"Fault to inject, repeatable: {SPEC_FORM}. KIND: {', '.join(FAULT_KINDS)}. "
             "TARGET: auto, cable/uplink (links), leaf/spine/core (switches), a topology id, "
             "or a rank (GPU faults). ONSET/END: iterations. slow: time multiplier (1.15 = 15% "
             "slower). every/on: intermittent; duty: slow at random, in each iteration with "
             "probability P.")
    # topology (c4.topology.fabrics)
    fabric: str = setting("rail", flag="--fabric",
                          help=f"Fabric: {'|'.join(FABRICS)}. rail: rail-optimized leaf/spine; "
                               "dual_port: the same with two ports per NIC; tor: all NICs of a "
                               "host on one top-of-rack leaf; three_tier: pods of "
                               "rail-optimized leaf/spine joined by a core; single_switch: "
                               "every NIC on one switch.")
    #: (diagnosis.sim.imported)
    topology: str | None = setting(None, flag="--topology", cli_type=Path, parse=str,
                                   help="Run on an imported topology (c4 topology import) "
                                        "instead of building --fabric: hosts of "
                                        "--gpus-per-host GPUs, each on a NIC cabled to a "
                                        "switch; hosts without GPUs get --gpus-per-host; links "
                                        "without capacity get --nic-gbps / --uplink-gbps (see "
                                        "diagnosis/sim/README.md).")
    nics_per_host: int | None = setting(None, flag="--nics-per-host", cli_type=int,
                                        parse=lambda n: n or None, to_cli=lambda n: n or 0,
                                        help="NICs per host (0: one per GPU); fewer NICs than "
                                             "GPUs: GPU i shares NIC i*nics/gpus.")
    hosts_per_leaf: int = setting(16, flag="--hosts-per-leaf",
                                  help="Hosts under one leaf switch (per rail on rail "
                                       "fabrics; on three_tier also a pod's hosts).")
    nic_gbps: float = setting(400.0, flag="--nic-gbps", help="NIC and cable speed.")
    uplink_gbps: float | None = setting(None, flag="--uplink-gbps", cli_type=float,
                                        parse=lambda g: g or None, to_cli=lambda g: g or 0.0,
                                        help="Switch-to-switch link speed (0: non-blocking).")
    nvlink_gbps: float = 2400.0
    # work per rank
    fwd_ms: float = 40.0          # forward compute of one microbatch on one stage
    bwd_ms: float = 80.0
    optimizer_ms: float = 30.0
    tp_bytes: int = 32 << 20      # tensor-parallel all-reduce per microbatch per direction
    p2p_bytes: int = 64 << 20     # activations / gradients between pipeline stages
    dp_bytes: int = 512 << 20     # gradient all-reduce per iteration
    latency_us: float = 8.0       # per ring step / per message
    # noise
    jitter: float = 0.03          # lognormal sigma of each compute and transfer
    gpu_spread: float = 0.01      # persistent per-GPU speed spread (sigma)
    warmup: tuple[float, ...] = (2.5, 1.4, 1.1)
    checkpoint_every: int = setting(25, flag="--checkpoint-every",
                                    help="Slow checkpoint step every N iterations (0: never).")
    checkpoint_ms: float = 1500.0
    gc_rate: float = setting(0.002, flag="--gc-rate",
                             help="One-off pauses per rank per iteration.")
    gc_ms: tuple[float, float] = (40.0, 400.0)
    iteration_jitter: float = 0.02   # lognormal sigma of a whole iteration's pace, all ranks
    congestion_rate: float = 0.1     # transient uplink congestion events per iteration
    congestion_iters: tuple[int, int] = (1, 2)        # each lasts this many iterations
    congestion_keep: tuple[float, float] = (0.4, 0.8)  # fraction of capacity left meanwhile
    clock_skew_us: float = 200.0  # per-host clock offset, uniform in +-this
    hang_wait_s: float = setting(60.0, flag="--hang-wait",
                                 help="Seconds recorded after the job stops moving.")
    t0_ns: int = 1_700_000_000_000_000_000
    job: str = setting("sim", flag="--job", help="Job name in the trace's meta record.")
    net_jitter: float = 0.02      # lognormal sigma of each transfer

    def __post_init__(self) -> None:
        def bad(msg: str) -> SimError:
            return SimError(msg)
        for name in ("gpus", "gpus_per_host", "tp", "pp", "iterations", "microbatches",
                     "layers"):
            if getattr(self, name) < 1:
                raise bad(f"--{name.replace('_', '-')} must be at least 1")
        if self.gpus_per_host % self.tp:
            raise bad(f"--tp {self.tp} must divide --gpus-per-host {self.gpus_per_host}: tensor "
                      "parallelism stays inside a host")
        if self.gpus % (self.tp * self.pp):
            raise bad(f"--gpus {self.gpus} is not a multiple of tp*pp = {self.tp * self.pp}")
        if self.gpus % self.gpus_per_host:
            raise bad(f"--gpus {self.gpus} is not a multiple of --gpus-per-host "
                      f"{self.gpus_per_host}")
        self._check_fabric()
        if self.sample is not None and self.sample < 1:
            raise bad(f"--sample {self.sample} must be at least 1")
        if not self.window_ms > 0 or self.window_ms * 1e6 != int(self.window_ms * 1e6):
            raise bad(f"--window-ms {self.window_ms} must be a positive whole number of ns")
        if (self.topology is None and self.fabric in RAIL_FABRICS
                and (self.tp * self.pp) % self.gpus_per_host and self.dp > 1):
            raise bad(f"tp*pp = {self.tp * self.pp} must be a multiple of --gpus-per-host "
                      f"{self.gpus_per_host} so that data-parallel rings stay on one rail of "
                      f"the {self.fabric} fabric (or use --fabric tor or single_switch)")

    def _check_fabric(self) -> None:
        if self.topology is not None and self.nics_per_host is not None:
            raise SimError("--nics-per-host: an imported --topology has its own NICs; drop it")
        if self.fabric not in FABRICS:
            raise SimError(f"--fabric {self.fabric!r} is not one of {', '.join(FABRICS)}")
        if self.nics_per_host is not None and not 1 <= self.nics_per_host <= self.gpus_per_host:
            raise SimError(f"--nics-per-host {self.nics_per_host} must be between 1 and "
                           f"--gpus-per-host {self.gpus_per_host} (a NIC serves one or more "
                           "GPUs; a NIC without a GPU would carry nothing)")
        if self.hosts_per_leaf < 1:
            raise SimError(f"--hosts-per-leaf {self.hosts_per_leaf} must be at least 1")
        if self.fabric == "single_switch" and self.uplink_gbps is not None:
            raise SimError("--uplink-gbps: the single_switch fabric has no uplinks; drop it or "
                           "pick another --fabric")
        if not self.nic_gbps > 0 or (self.uplink_gbps is not None and not self.uplink_gbps > 0):
            raise SimError("--nic-gbps and --uplink-gbps must be positive")

    @property
    def fabric_label(self) -> str:
        """How messages name the fabric: 'the rail fabric', 'the imported topology t.json'."""
        if self.topology is not None:
            return f"the imported topology {self.topology.rsplit('/', 1)[-1]}"
        return f"the {self.fabric} fabric"

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def window_ns(self) -> int:
        return int(self.window_ms * 1e6)

    @property
    def hosts(self) -> int:
        return self.gpus // self.gpus_per_host
