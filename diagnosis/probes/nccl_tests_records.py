"""What one run of an nccl-tests binary (all_reduce_perf, alltoall_perf, ...) reported."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Measurement:
    """One half of a result line: out-of-place or in-place."""

    time_us: float
    algbw_GBps: float  # GB/s, as nccl-tests prints it
    busbw_GBps: float
    wrong: float | None  # elements found wrong; None when validation was off ("N/A")
    # Per-iteration columns of builds run with per-iteration timing (i_min, i_max, ...).
    per_iter: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SizeResult:
    """One line of the results table."""

    size_bytes: int
    count: int
    type: str
    redop: str
    root: int | None  # None where the build printed no root column
    out_of_place: Measurement | None  # None where only in-place was run
    in_place: Measurement | None
    line: int = 0  # line number in the source text (0 for JSON)

    @property
    def busbw_GBps(self) -> float:
        """The better of the two bus bandwidths (what people quote for a size)."""
        vals = [m.busbw_GBps for m in (self.out_of_place, self.in_place) if m is not None]
        return max(vals) if vals else 0.0


@dataclass(frozen=True)
class Device:
    """One ``#  Rank  3 Group  0 Pid 123 on host device  3 [0000:0c:00] NVIDIA H100`` line."""

    rank: int
    host: str
    device: int
    bus_id: str  # "0000:0c:00" from newer builds, "0x35" from older ones
    name: str
    pid: int | None = None
    group: int | None = None


@dataclass(frozen=True)
class NcclTestsRun:
    """Everything one run printed (or wrote as JSON)."""

    test: str | None = None  # program name, when the output names it
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    params: dict[str, int | str] = field(default_factory=dict)  # nThread, minBytes, iters...
    devices: tuple[Device, ...] = ()
    results: tuple[SizeResult, ...] = ()
    avg_busbw_GBps: float | None = None
    avg_busbw_ok: bool | None = None  # None when no threshold was checked
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    errors: tuple[str, ...] = ()
    complete: bool = False  # the footer was seen: the run was not cut short

    @property
    def ranks(self) -> int:
        return len(self.devices)

    @property
    def hosts(self) -> tuple[str, ...]:
        """Hosts in rank order, each once."""
        return tuple(dict.fromkeys(d.host for d in sorted(self.devices, key=lambda d: d.rank)))

    @property
    def wrong(self) -> float:
        """Total wrong elements over every size (0 when validation was off)."""
        return sum(m.wrong or 0.0 for r in self.results
                   for m in (r.out_of_place, r.in_place) if m is not None)

    @property
    def failed(self) -> bool:
        """The run reported wrong results, out-of-bounds values, a low bandwidth or errors."""
        return bool(self.wrong or self.out_of_bounds or self.avg_busbw_ok is False
                    or self.out_of_bounds_ok is False or self.errors)


def version_of_code(code: int) -> str:
    """"2.29.7" from NCCL_VERSION_CODE 22907 (major*10000 + minor*100 + patch since 2.9;
    major*1000 + minor*100 + patch before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
