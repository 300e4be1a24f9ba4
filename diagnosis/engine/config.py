"""Every threshold of the detection engine, in one validated, documented place.

Thresholds are relative to what the engine learns from the job itself (the spread of its own
measurements, the durations and periods it has seen); the absolute values below are floors that
keep a perfectly quiet simulation from turning microseconds into alarms.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from diagnosis.errors import ConfigError


@dataclass(frozen=True)
class EngineConfig:
    """Thresholds and window sizes of :class:`diagnosis.engine.Engine`.

    Memory is bounded by ``window`` (instances kept per communicator) and ``history``
    (per-communicator and per-connection samples kept for the slow detectors).
    """

    #: Recent instances (one collective call across its members) kept per communicator. Must
    #: exceed the calls a communicator can have in flight at once.
    window: int = 64
    #: Samples kept per communicator member / per connection for the slow detectors.
    history: int = 64

    #: How far the clocks of two hosts may disagree (the trace format promises under 1 ms):
    #: differences of times taken on different hosts below this are no evidence.
    clock_skew_ns: int = 1_000_000

    # ---- hangs -------------------------------------------------------------------------------
    #: A wait counts as a hang once it exceeds ``hang_factor`` times the longest normal
    #: (span + period) this communicator has shown: a rank that is several iterations behind
    #: is not merely slow.
    hang_factor: float = 4.0
    #: Floor of the learnt hang bound, in ns.
    hang_min_ns: int = 1_000_000_000
    #: Bound used for a call with no history to learn from: of a communicator with no completed
    #: call yet, or of an operation its communicator never completed before (the barrier after
    #: a checkpoint that one rank writes alone: no fault however long the others wait for it).
    hang_cold_ns: int = 30_000_000_000
    #: How late signs of life may reach the engine after the fact: collectors flush rows and
    #: stats about once a second and sidecars forward stats once a second. A decision that
    #: rests on not having heard from a rank waits this long first.
    evidence_delay_ns: int = 3_000_000_000
    #: A rank heard from (a collector's heartbeat) this long after the data of a call it waits
    #: in was due is alive and waiting: the data is stuck on the way. Longer than the
    #: collectors' heartbeat period, so that a rank frozen in the call is not taken as alive.
    alive_after_ns: int = 2_500_000_000

    # ---- non-communication slow ---------------------------------------------------------------
    #: Smallest excess of a rank's own compute time over its peers', as a fraction of the
    #: peers' median, that is worth a report (persistent per-GPU spread stays below it).
    slow_min_excess: float = 0.06
    #: Without enough samples before the change point to tell a change from a trait (a GPU
    #: that was always a little slower), the excess must reach this.
    slow_min_excess_unseen: float = 0.15
    #: A sample counts as "late" above ``max(slow_min_excess / 2, slow_noise_k * sigma)``,
    #: sigma being the communicator's robust noise.
    slow_noise_k: float = 1.5
    #: Fewest post-onset samples before a rank can be judged.
    slow_min_samples: int = 6
    #: Smallest rise, from before the change point to after it, of the fraction of late samples
    #: (intermittent faults are late in some iterations only).
    slow_min_frac: float = 0.35
    #: A rank is slow when so many late samples after the change point have at most this
    #: probability under its communicator's base rate of late samples (tested for thousands of
    #: ranks and split points, hence tiny).
    slow_alpha: float = 1e-9
    #: Each rank of a slow host must pass this weaker test, and the host their combined one
    #: against ``slow_alpha``.
    slow_alpha_member: float = 1e-3
    #: Floor of the base rate of late samples.
    slow_base_rate: float = 0.03
    #: Compute time between two calls below this (ns) is treated as this, so that
    #: back-to-back calls do not turn jitter into huge relative excesses.
    min_compute_ns: int = 1_000_000
    #: A host is named (rather than its GPUs) when at least this fraction of its ranks, and at
    #: least two, are slow.
    host_fraction: float = 0.75
    #: Slow again and again (a GPU throttling now and then, a host's recurring stall): a member
    #: with at least ``slow_rec_episodes`` episodes of samples above
    #: ``max(slow_rec_min_excess, slow_rec_noise_k * sigma)`` (scaled as ``slow_min_excess``
    #: is for sampled calls), too many for the rate at which such episodes start over every
    #: member of its size class (per sample, floored at ``slow_rec_base_rate``): one-off
    #: pauses strike random ranks.
    slow_rec_episodes: int = 3
    slow_rec_min_excess: float = 0.1
    slow_rec_noise_k: float = 4.0
    slow_rec_base_rate: float = 0.001
    #: A member slow from a change point on that also recurs is described as recurring when
    #: fewer than this fraction of its samples since its first episode were late.
    slow_rec_duty: float = 0.75
    #: A filed slow rank or host that this many detection passes in a row no longer find
    #: (judging more samples) is withdrawn: its finding was a chance split of its samples.
    slow_unconfirmed_passes: int = 3

    #: With sampled calls (see ``straggle``), the kept calls of a communicator within a bucket
    #: of time make one sample: about four of them, from a quarter of this (ns) to twice it.
    straggle_bucket_ns: int = 1_000_000_000
    #: ... and the smallest lateness worth a report, as a fraction of the communicator's pace
    #: (the mean time between its calls: wall time, so a GPU 10% slower at a compute share of
    #: half of it shows about 5%; calls issued right after another show none).
    straggle_min_excess: float = 0.03
    #: ... except for a lasting change of level against the member's own past, which every
    #: later sample confirms (a GPU 12% slower, computing a quarter of the pace, shows 3%).
    straggle_min_shift: float = 0.02

    # ---- communication slow -------------------------------------------------------------------
    #: Samples of a connection (or communicator operation) skipped before its baseline is
    #: learnt (connection set-up, warm-up).
    comm_skip: int = 1
    #: Samples whose median becomes the baseline.
    comm_learn: int = 4
    #: Smallest slowdown (duration / baseline - 1) worth a report.
    comm_min_excess: float = 0.06
    #: A sample is "slow" above ``max(comm_min_excess / 2, comm_noise_k * sigma)`` of excess,
    #: sigma being the robust spread of every connection's excess.
    comm_noise_k: float = 2.5
    #: Smallest rise of the fraction of slow samples across the change point.
    comm_min_frac: float = 0.35
    #: Fewest post-onset samples before a connection is judged (more than a transient
    #: congestion of an uplink by other traffic lasts).
    comm_min_samples: int = 6
    #: Fewest judged samples before a connection's change point (see ``Localizer._lasting``);
    #: a communicator's transfer time, which mixes every member's transfers and the pipeline
    #: sends beside them, needs ``comm_min_samples``. Every sample counts in a short recording.
    comm_min_before: int = 3
    #: A slowdown is a fault once its slow samples after the change point spread over at least
    #: this much time (ns): a connection sampled many times per iteration (pipeline
    #: microbatches) gathers enough samples within one transient congestion of its path by
    #: other traffic, which passes within seconds; a faulty component stays slow.
    comm_min_span_ns: int = 10_000_000_000
    #: ... or over this many of the job's iterations, when they take less time (but at least
    #: ``comm_min_span_low_ns``): a job of sub-second iterations recorded for a few seconds
    #: shows a lasting slowdown as many iterations that a transient congestion never spans.
    comm_min_rounds: int = 6
    comm_min_span_low_ns: int = 2_000_000_000
    #: A connection slow from its first transfer on (its baseline learnt slow) is one whose
    #: baseline exceeds the median of its peers' (the connections of its transfer size, at least
    #: ``comm_peer_min`` of them) by this fraction, and by more than their spread.
    comm_peer_excess: float = 0.15
    comm_peer_min: int = 8
    #: ... weighed by the load on its path (:mod:`diagnosis.engine.peers`): a component on the
    #: recorded paths is named when at least ``comm_peer_route_purity`` of the judged
    #: connections through it are slow; without paths, a NIC or cable when at least
    #: ``comm_peer_purity`` are (a connection slow beyond its NICs' load may have hashed onto a
    #: busy uplink). One connection alone is enough when it is slow beyond
    #: ``comm_peer_single`` (a flow alone on a slow uplink).
    comm_peer_purity: float = 1.0
    comm_peer_route_purity: float = 0.8
    comm_peer_single: float = 0.4
    #: When even the best connections of a transfer size fall short of the capacity of their
    #: path (its narrowest link's rate over the connections sharing it) by this fraction, a
    #: component that all of them cross is named: there are no peers to compare (one switch
    #: for the whole job, slow since the recording began). Only transfers that take at least
    #: ``comm_cap_min_ns`` at that capacity are judged so (shorter ones are timed by latency).
    comm_cap_excess: float = 0.4
    comm_cap_min_ns: int = 200_000
    #: A connection is slow when its slow samples after the change point have at most this
    #: probability under the base rate.
    comm_alpha: float = 1e-6
    #: A component is accepted when at least this fraction of the traffic crossing it (after the
    #: onset) is slow; healthy traffic through a component clears it.
    comm_purity: float = 0.6
    #: Slow again and again (a flapping port, pause frames: slow on one iteration in three, or
    #: at random, healthy between): a connection (or communicator operation) is slow when it has
    #: at least ``comm_rec_episodes`` episodes of samples above
    #: ``max(comm_rec_min_excess, comm_rec_noise_k * sigma)`` of excess, too many for the
    #: rate at which such episodes start over every connection (per sample, floored at
    #: ``comm_rec_base_rate``) at ``comm_alpha``. A transient congestion is one episode.
    comm_rec_episodes: int = 3
    comm_rec_min_excess: float = 0.15
    comm_rec_noise_k: float = 4.0
    comm_rec_base_rate: float = 0.001
    #: ... and without connection records, for a communicator's transfer time taken from its
    #: members' calls (on their own clocks, so that it moves whenever another member enters
    #: last): ``comm_rec_min_excess_calls`` instead of ``comm_rec_min_excess``.
    comm_rec_min_excess_calls: float = 0.5
    #: A connection slow from a change point on that also recurs is described as recurring
    #: when fewer than this fraction of its samples since its first episode were slow.
    comm_rec_duty: float = 0.75

    # ---- lossy links (retransmitted segments of sampled sockets) -------------------------------
    #: Retransmissions are counted per connection over this sliding window of data time (ns).
    lossy_window_ns: int = 20_000_000_000
    #: Floor: fewest segments a connection must retransmit within the window to count as lossy
    #: (healthy connections retransmit a few, e.g. under a burst's tail drop).
    lossy_min_retrans: int = 50
    #: ... and at least this many times the fleet's typical count (lower quartile) and its own
    #: learnt baseline.
    lossy_factor: float = 10.0
    #: ... in at least this many samples of the window (one burst of drops is not a lossy link).
    lossy_min_samples: int = 3

    # ---- errors --------------------------------------------------------------------------------
    #: An instance whose present members all completed while some never reported is a rank that
    #: stopped reporting once it is older than the hang bound.
    report_missing: bool = True

    # ---- cadence ------------------------------------------------------------------------------
    #: Slow detectors run at most once per this much data time (ns); hang checks run on every
    #: ``advance``. Offline, where a report's time is its evidence's, this only bounds the
    #: detectors' cost; live, see :meth:`analysed_every`.
    detect_every_ns: int = 2_000_000_000

    def __post_init__(self) -> None:
        positive_int = ("window", "history", "hang_min_ns", "clock_skew_ns", "hang_cold_ns",
                        "alive_after_ns", "evidence_delay_ns",
                        "slow_min_samples", "slow_unconfirmed_passes", "slow_rec_episodes",
                        "min_compute_ns", "straggle_bucket_ns", "comm_learn",
                        "comm_min_samples", "comm_min_span_ns",
                        "comm_min_before", "comm_min_rounds", "comm_min_span_low_ns",
                        "comm_peer_min", "comm_rec_episodes", "comm_cap_min_ns",
                        "detect_every_ns",
                        "lossy_window_ns", "lossy_min_retrans", "lossy_min_samples")
        for name in positive_int:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"EngineConfig.{name} must be a positive integer, got {value!r}")
        if self.comm_skip < 0:
            raise ConfigError(f"EngineConfig.comm_skip must be >= 0, got {self.comm_skip!r}")
        for name in ("slow_min_frac", "comm_min_frac", "comm_purity", "host_fraction", "comm_alpha",
                     "comm_peer_route_purity", "slow_rec_duty", "comm_rec_duty",
                     "slow_alpha", "slow_alpha_member", "slow_base_rate"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ConfigError(f"EngineConfig.{name} must be in (0, 1], got {value!r}")
        for name in ("hang_factor", "slow_min_excess", "slow_noise_k", "slow_min_excess_unseen",
                     "slow_rec_min_excess", "slow_rec_noise_k", "slow_rec_base_rate",
                     "straggle_min_excess", "straggle_min_shift",
                     "comm_min_excess", "comm_noise_k", "comm_peer_excess", "comm_cap_excess",
                     "comm_peer_purity", "comm_peer_single", "comm_rec_min_excess",
                     "comm_rec_min_excess_calls",
                     "comm_rec_noise_k",
                     "comm_rec_base_rate"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"EngineConfig.{name} must be positive, got {value!r}")
        if self.lossy_factor < 1.0:
            raise ConfigError(f"EngineConfig.lossy_factor must be >= 1, got {self.lossy_factor!r}")
        if self.hang_factor < 1.0:
            raise ConfigError(f"EngineConfig.hang_factor must be >= 1, got {self.hang_factor!r}")
        if self.history < self.slow_min_samples + 2:
            raise ConfigError(f"EngineConfig.history ({self.history}) must exceed "
                             f"slow_min_samples + 1 ({self.slow_min_samples + 1})")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def analysed_every(cls, interval_s: float) -> EngineConfig:
        """The configuration of an engine advanced every ``interval_s`` (the daemon's analysis
        interval): its slow detectors run at every advance, so that the interval is what a
        slow fault waits for, not the default cadence. Advances come at least an interval
        apart; the margin keeps a clock's slew from skipping one."""
        return cls(detect_every_ns=max(1, int(0.9 * interval_s * 1e9)))
