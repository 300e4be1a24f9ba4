"""The sidecar's health sampler: every ``interval_s`` (5 s by default) one pass over the node's
GPUs (NVML, else ``nvidia-smi -q -x`` or a dcgm-exporter endpoint when configured), the kernel
log's new records, the GPUs' PCIe links and AER counters, the IB ports and host pressure, as
``health`` records named by topology ids. One pass costs a few milliseconds of CPU
(bench/health_collect.py).

Names: a GPU is ``gpu_map[pci]`` (``--gpu-map 0000:db:00=node3/gpu7``), else
``<host>/gpu<index>``; an XID names its GPU by PCI address through the same map. An IB port
is ``nic_map["mlx5_0/1"]`` (the sidecar's ``--nic-map``), else ``<host>/<dev>/<port>``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from c4.proto.health import HealthRecord
from collectors.health.errors import HealthParseError
from collectors.health.gpu import GpuSample, pci_key
from collectors.health.infiniband import read_ib_sysfs
from collectors.health.records import event_record, gpu_record, host_record, ib_record
from collectors.health.settings import HealthWatchConfig
from collectors.health.sources import (
    DcgmSource,
    HostSource,
    KmsgFollower,
    NvmlSource,
    Runner,
    SmiSource,
    pcie_values,
    run_command,
)

log = logging.getLogger(__name__)

class HealthWatch:
    def __init__(self, host: str, config: HealthWatchConfig | None = None, *,
                 nic_map: dict[str, str] | None = None, runner: Runner = run_command,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.host = host
        self.config = cfg = config or HealthWatchConfig()
        self.nic_map = dict(nic_map or {})
        self.clock = clock
        self.gpu_ids = dict(cfg.gpu_map)
        self.errors = 0
        self._gpu: NvmlSource | SmiSource | DcgmSource | None = None
        if cfg.gpu in ("auto", "nvml"):
            self._gpu = NvmlSource.open()
            if self._gpu is None and cfg.gpu == "nvml":
                log.warning("--health-gpu nvml: nvidia-ml-py is missing or finds no GPU")
        elif cfg.gpu == "smi":
            self._gpu = SmiSource(runner, cfg.smi_binary)
        elif cfg.gpu == "dcgm":
            self._gpu = DcgmSource(cfg.dcgm_url)
        self._kmsg = KmsgFollower(cfg.kmsg) if cfg.kmsg else None
        self._host = HostSource(cfg.proc_root, cfg.cgroup_dir or None)
        self._host.steal_pct()      # the baseline steal is measured against

    def close(self) -> None:
        if self._kmsg is not None:
            self._kmsg.close()

    def poll(self) -> list[HealthRecord]:
        """One pass over every source; a source that fails is logged and skipped."""
        t = self.clock()
        out: list[HealthRecord] = []
        for read in (self._gpus, self._events, self._ports, self._pressure):
            try:
                out.extend(read(t))
            except (HealthParseError, OSError, ValueError) as exc:
                self.errors += 1
                log.warning("health source %s failed: %s", read.__name__.lstrip("_"), exc)
        return out

    # ----- sources ----------------------------------------------------------------------------
    def _gpu_id(self, g: GpuSample, order: int) -> str:
        try:
            key = pci_key(g.bus_id)
        except ValueError:
            key = ""
        ident = self.gpu_ids.get(key)
        if ident is None:
            ident = f"{self.host}/gpu{g.index if g.index is not None else order}"
            if key:
                self.gpu_ids[key] = ident     # XIDs name the GPU by this address
        return ident

    def _gpus(self, t: int) -> list[HealthRecord]:
        if self._gpu is None:
            return []
        out = []
        for order, g in enumerate(self._gpu.read()):
            ident = self._gpu_id(g, order)
            if g.bus_id:
                bdf = _sysfs_bdf(g.bus_id)
                extra = pcie_values(Path(self.config.sysfs_root) / "bus/pci/devices" / bdf)
                g.values.update({k: v for k, v in extra.items() if k not in g.values})
            if not g.values and not g.reasons:
                continue        # every field N/A or blank: nothing to say about this GPU
            out.append(gpu_record(self.host, ident, t, g))
        return out

    def _events(self, t: int) -> list[HealthRecord]:
        if self._kmsg is None:
            return []
        out = []
        for e in self._kmsg.read():
            component = ""
            if e.kind in ("xid", "gpu_off_bus", "aer", "aer_bit"):
                try:
                    component = self.gpu_ids.get(pci_key(e.device), "")
                except ValueError:
                    component = ""
            if (r := event_record(self.host, component, t, e)) is not None:
                out.append(r)
        return out

    def _ports(self, t: int) -> list[HealthRecord]:
        out = []
        for p in read_ib_sysfs(Path(self.config.sysfs_root) / "class" / "infiniband"):
            if self.nic_map and p.name not in self.nic_map:
                continue
            ident = self.nic_map.get(p.name, f"{self.host}/{p.name}")
            out.append(ib_record(self.host, ident, t, p))
        return out

    def _pressure(self, t: int) -> list[HealthRecord]:
        r = host_record(self.host, t, self._host.psi(), self._host.steal_pct())
        return [r] if r is not None else []


def _sysfs_bdf(bus_id: str) -> str:
    """``00000000:DB:00.0`` → ``0000:db:00.0`` (sysfs spells the domain with 4 digits)."""
    domain, rest = bus_id.split(":", 1) if bus_id.count(":") == 2 else ("0000", bus_id)
    if "." not in rest:
        rest += ".0"
    return f"{domain[-4:]}:{rest}".lower()
