"""What the sidecar's health watch reads (``c4 sidecar --health-*`` flags), apart from the
watch itself so that building the command's options imports no sampler."""

from __future__ import annotations

from dataclasses import dataclass

from c4.settings import one_of, positive, setting, validate
from collectors.errors import ConfigError
from collectors.health.gpu import pci_key

GPU_MODES = ("auto", "nvml", "smi", "dcgm", "off")


@dataclass(frozen=True)
class HealthWatchConfig:
    """What the sidecar reads for health (``c4 sidecar --health-*`` flags)."""

    interval_s: float = setting(5.0, flag="--health-interval", env="C4_HEALTH_INTERVAL",
                                check=positive, help="Seconds between health samples.")
    #: GPU state: auto (NVML where nvidia-ml-py imports and finds a GPU), nvml, smi
    #: (``nvidia-smi -q -x``), dcgm (a dcgm-exporter endpoint, ``dcgm_url``), off
    gpu: str = setting("auto", flag="--health-gpu", env="C4_HEALTH_GPU", check=one_of(GPU_MODES),
                       help="GPU state from: auto (NVML where nvidia-ml-py is installed and "
                            "finds a GPU), nvml, smi (nvidia-smi -q -x), dcgm (--dcgm-url), "
                            "off.")
    smi_binary: str = "nvidia-smi"
    dcgm_url: str = setting("http://127.0.0.1:9400/metrics", flag="--dcgm-url",
                            env="C4_DCGM_URL",
                            help="dcgm-exporter endpoint for --health-gpu dcgm.")
    #: the kernel log to follow ("" : none)
    kmsg: str = setting("/dev/kmsg", flag="--kmsg", env="C4_KMSG",
                        help="Kernel log to follow for XID, AER and link events ('' : none).")
    #: the sidecar's --sysfs-root
    sysfs_root: str = "/sys"
    proc_root: str = "/proc"
    #: read PSI of this cgroup v2 directory instead of the whole host ("" : the host)
    cgroup_dir: str = setting("", flag="--health-cgroup", env="C4_HEALTH_CGROUP",
                              help="Read PSI from this cgroup v2 directory (the job's own) "
                                   "instead of the whole host's /proc/pressure.")
    #: PCI address -> topology GPU id
    gpu_map: tuple[tuple[str, str], ...] = setting(
        (), flag="--gpu-map", env="C4_GPU_MAP", cli_type=str,
        parse=lambda text: parse_gpu_map(text), to_cli=lambda pairs: format_map(pairs),
        help="GPU PCI addresses to topology GPU ids, PCI=GPU,...: 0000:db:00=node3/gpu7 "
             "(default: HOST/gpuINDEX).")

    def __post_init__(self) -> None:
        validate(self, ConfigError)
        for pci, _ in self.gpu_map:
            try:
                pci_key(pci)
            except ValueError as exc:
                raise ConfigError(f"--gpu-map (C4_GPU_MAP): {exc}") from None


def format_map(pairs: tuple[tuple[str, str], ...]) -> str:
    """``KEY=VALUE,...``: the text ``parse_gpu_map`` (and ``--nic-map``) read."""
    return ",".join(f"{key}={value}" for key, value in pairs)


def parse_gpu_map(text: str) -> tuple[tuple[str, str], ...]:
    """``0000:db:00=node3/gpu7,0000:1b:00.0=node3/gpu0`` → pairs (PCI keys normalised)."""
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        pci, sep, ident = item.partition("=")
        if not sep or not ident:
            raise ValueError(f"--gpu-map entry {item!r} is not PCI=TOPOLOGY_ID")
        out.append((pci_key(pci), ident.strip()))
    return tuple(out)
