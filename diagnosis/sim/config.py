"""What to simulate: the job's shape, its timing model, its noise, and the faults to inject."""

from __future__ import annotations

from dataclasses import dataclass

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
        kw: dict[str, object] = {}
        for opt in opts:
            key, sep, value = opt.partition("=")
            if not sep or key not in ("slow", "end", "every", "on", "duty"):
                raise SimError(f"fault {text!r}: option {opt!r} is not one of slow=, end=, "
                               "every=, on=, duty=")
            kw[key] = _float(value, text, key) if key in ("slow", "duty") \
                else _int(value, text, key)
        return cls(kind=kind, target=target or "auto", onset=onset, **kw)  # type: ignore[arg-type]

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

    gpus: int = 512
    gpus_per_host: int = 8
    tp: int = 8
    pp: int = 4
    iterations: int = 40
    microbatches: int = 4
    #: transformer layers per stage: 1, one all-reduce per pass (the classic model); N > 1,
    #: per layer a sequence-parallel all-gather and reduce-scatter (diagnosis.sim.layers)
    layers: int = 1
    seed: int = 0
    conns: bool = True
    #: write the reduced trace of format version 2 (diagnosis.sim.reduced), keeping the calls
    #: sampled at this factor; None: version 1, every call
    sample: int | None = None
    window_ms: float = 1000.0     # the reduced trace's progress / linkstat window
    #: conn records carry the route each transfer took; without it (as collectors that cannot
    #: see which ECMP path a flow hashed to) the analyzer has the topology's candidates only
    paths: bool = True
    faults: tuple[FaultSpec, ...] = ()
    # topology (c4.topology.fabrics): the fabric, and NICs per host (None: one per GPU;
    # fewer: GPU i shares NIC i*nics//gpus)
    fabric: str = "rail"
    #: an imported topology file to run on instead of building ``fabric`` (diagnosis.sim.imported)
    topology: str | None = None
    nics_per_host: int | None = None
    hosts_per_leaf: int = 16
    nic_gbps: float = 400.0
    uplink_gbps: float | None = None
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
    checkpoint_every: int = 25    # 0: never
    checkpoint_ms: float = 1500.0
    gc_rate: float = 0.002        # one-off pauses per rank per iteration
    gc_ms: tuple[float, float] = (40.0, 400.0)
    iteration_jitter: float = 0.02   # lognormal sigma of a whole iteration's pace, all ranks
    congestion_rate: float = 0.1     # transient uplink congestion events per iteration
    congestion_iters: tuple[int, int] = (1, 2)        # each lasts this many iterations
    congestion_keep: tuple[float, float] = (0.4, 0.8)  # fraction of capacity left meanwhile
    clock_skew_us: float = 200.0  # per-host clock offset, uniform in +-this
    hang_wait_s: float = 60.0     # recording goes on this long after the job stops moving
    t0_ns: int = 1_700_000_000_000_000_000
    job: str = "sim"
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
