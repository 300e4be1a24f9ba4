"""Where a node's health is read from, each behind a seam (a file root, a command runner) so
the same code runs on the node and on recorded files in tests.

- ``SmiSource``: ``nvidia-smi -q -x`` through a runner (configured; about 0.1-0.3 s a call).
- ``DcgmSource``: a dcgm-exporter endpoint's scrape (configured).
- ``NvmlSource``: NVML through nvidia-ml-py, only where that package imports and a GPU exists;
  the project does not depend on it (``pip install nvidia-ml-py`` on GPU nodes).
- ``KmsgFollower``: new records of ``/dev/kmsg`` (or any file of such records), non-blocking.
- ``pcie_values``: a PCI device's link width / speed and AER totals from sysfs.
- ``HostSource``: PSI files and CPU steal.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.health.dcgm import parse_exporter_scrape
from collectors.health.errors import HealthParseError
from collectors.health.gpu import GpuSample, reasons_from_mask
from collectors.health.host import (
    CpuTimes,
    Psi,
    parse_aer_counters,
    parse_proc_stat,
    parse_psi,
    steal_fraction,
)
from collectors.health.kernel import KernelEvent, parse_kernel_line
from collectors.health.smi_xml import parse_smi_xml

log = logging.getLogger(__name__)

Runner = Callable[[list[str]], bytes]


def run_command(argv: list[str], timeout_s: float = 10.0) -> bytes:
    """The command's stdout; HealthParseError (with its stderr) when it fails."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HealthParseError(f"{' '.join(argv)} could not run: {exc}") from None
    if done.returncode != 0:
        raise HealthParseError(f"{' '.join(argv)} exited {done.returncode}: "
                               f"{done.stderr.decode(errors='replace').strip()[:200]}")
    return done.stdout


class SmiSource:
    """GPU state from ``nvidia-smi -q -x``."""

    def __init__(self, runner: Runner = run_command, binary: str = "nvidia-smi") -> None:
        self._runner, self._binary = runner, binary

    def read(self) -> list[GpuSample]:
        return parse_smi_xml(self._runner([self._binary, "-q", "-x"]), "nvidia-smi -q -x")


class DcgmSource:
    """GPU state from a dcgm-exporter endpoint (``http://127.0.0.1:9400/metrics``), for nodes
    that run one already."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"dcgm-exporter URL {url!r} must start with http:// or https://")
        self.url, self.timeout_s = url, timeout_s

    def read(self) -> list[GpuSample]:
        import urllib.request

        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
                text = resp.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise HealthParseError(f"dcgm-exporter at {self.url} did not answer: {exc}; is it "
                                   "running (default port 9400)?") from None
        return parse_exporter_scrape(text, self.url)


class NvmlSource:
    """GPU state through NVML. :meth:`open` returns None where nvidia-ml-py is not installed
    or finds no GPU, so the caller falls back to ``nvidia-smi`` (or reads no GPUs)."""

    def __init__(self, nvml: Any) -> None:   # the pynvml module (untyped)
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i)
                         for i in range(nvml.nvmlDeviceGetCount())]

    @classmethod
    def open(cls) -> NvmlSource | None:
        try:
            # optional and untyped: the NVIDIA bindings are on GPU hosts only
            import pynvml  # type: ignore[import-not-found]
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
            src = cls(pynvml)
        except Exception as exc:  # NVMLError_*: no driver, no GPU
            log.info("NVML is not usable here (%s): no GPU health from NVML", exc)
            return None
        return src if src._handles else None

    def read(self) -> list[GpuSample]:
        return [_nvml_sample(self._nvml, h, i) for i, h in enumerate(self._handles)]


def _nvml_sample(nv: Any, h: Any, index: int) -> GpuSample:
    values: dict[str, float] = {}

    def put(name: str, fn: Callable[[], float]) -> None:
        # not supported on this part: absent, never 0
        with contextlib.suppress(nv.NVMLError):
            values[name] = float(fn())

    put("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
    put("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
    put("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
    put("sm_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
    put("util_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu)
    put("pcie_gen", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h))
    put("pcie_gen_max", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h))
    put("pcie_width", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h))
    put("pcie_width_max", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h))
    put("pcie_replays", lambda: nv.nvmlDeviceGetPcieReplayCounter(h))
    reasons: frozenset[str] = frozenset()
    with contextlib.suppress(nv.NVMLError, AttributeError):  # older NVML: no such call
        reasons = reasons_from_mask(int(nv.nvmlDeviceGetCurrentClocksEventReasons(h)))
    bus = nv.nvmlDeviceGetPciInfo(h).busId
    return GpuSample(bus.decode() if isinstance(bus, bytes) else str(bus), values, reasons,
                     index=index)


class KmsgFollower:
    """The kernel log's new records: ``/dev/kmsg`` opened non-blocking and moved to its end, so
    a (re)started sidecar reports what happens from now on, not the boot log. Each read
    returns one record; an overwritten record (EPIPE: the ring wrapped past us) is skipped."""

    def __init__(self, path: str | Path = "/dev/kmsg", *, from_start: bool = False,
                 max_records: int = 10_000) -> None:
        self.path = str(path)
        self.max_records = max_records
        self.lost = 0
        self._fd: int | None = None
        self._buf = b""
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            if not from_start:
                os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:
            log.warning("cannot follow %s (%s): no kernel events (XID, AER, link) from it",
                        self.path, exc)
            self._fd = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def read(self) -> list[KernelEvent]:
        """The health events logged since the last read (at most ``max_records`` records)."""
        if self._fd is None:
            return []
        lines: list[bytes] = []
        is_char = self.path == "/dev/kmsg" or os.path.basename(self.path) == "kmsg"
        while len(lines) < self.max_records:
            try:
                chunk = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.lost += 1
                    continue
                raise
            if not chunk:
                break
            if is_char:
                lines.append(chunk)     # one record per read
            else:
                data = self._buf + chunk
                *done, self._buf = data.split(b"\n")
                lines.extend(done)
        out = []
        for raw in lines:
            text = raw.decode("utf-8", errors="replace").split("\n", 1)[0]
            if (e := parse_kernel_line(text)) is not None:
                out.append(e)
        return out


_GT_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def pcie_values(device_dir: str | Path) -> dict[str, float]:
    """``current_link_width`` etc. of one PCI device directory (``/sys/bus/pci/devices/<bdf>``)
    and its AER totals; values the kernel does not expose are absent."""
    d = Path(device_dir)
    out: dict[str, float] = {}

    def text(name: str) -> str | None:
        try:
            return (d / name).read_text().strip()
        except OSError:
            return None

    for name, key in (("current_link_width", "pcie_width"), ("max_link_width", "pcie_width_max")):
        t = text(name)
        if t and t.isdigit() and int(t) > 0:
            out[key] = float(t)
    for name, key in (("current_link_speed", "pcie_gen"), ("max_link_speed", "pcie_gen_max")):
        t = text(name)
        if t:
            try:
                gen = _GT_TO_GEN.get(float(t.split()[0]))
            except ValueError:
                gen = None
            if gen:
                out[key] = float(gen)
    for name, key in (("aer_dev_correctable", "aer_correctable"),
                      ("aer_dev_nonfatal", "aer_nonfatal"), ("aer_dev_fatal", "aer_fatal")):
        t = text(name)
        if t:
            counts = parse_aer_counters(t, str(d / name))
            total = next((v for k, v in counts.items() if k.startswith("TOTAL_ERR")), None)
            if total is not None:
                out[key] = float(total)
    return out


class HostSource:
    """PSI (``<root>/pressure/{cpu,memory,io}`` for ``/proc``, or a cgroup v2 directory's
    ``*.pressure``) and CPU steal since the previous read (``/proc/stat``)."""

    def __init__(self, proc_root: str | Path = "/proc", cgroup_dir: str | Path | None = None
                 ) -> None:
        self.proc = Path(proc_root)
        self.cgroup = Path(cgroup_dir) if cgroup_dir else None
        self._last: CpuTimes | None = None

    def psi(self) -> dict[str, Psi]:
        out = {}
        for res in ("cpu", "memory", "io"):
            path = (self.cgroup / f"{res}.pressure") if self.cgroup else \
                self.proc / "pressure" / res
            try:
                out[res] = parse_psi(path.read_text(), str(path))
            except OSError:
                continue            # PSI off (psi=0) or kernel < 4.20: no pressure
        return out

    def steal_pct(self) -> float | None:
        try:
            now = parse_proc_stat((self.proc / "stat").read_text())
        except OSError:
            return None
        last, self._last = self._last, now
        if last is None:
            return None
        frac = steal_fraction(last, now)
        return None if frac is None else 100.0 * frac
