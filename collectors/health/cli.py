"""``c4 health records``: recorded tool output (nvidia-smi, DCGM, the kernel log, an IB sysfs
tree, PSI files) as ``health`` trace lines, to join a trace offline (``c4 analyze`` reads them
beside the timing records) or to look at what c4 makes of a node's output."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import orjson
import typer

SOURCES = ("smi-text", "smi-xml", "query-gpu", "dcgm-scrape", "dcgmi-diag", "kernel",
           "ib-sysfs", "psi")


def records(
    source: str = typer.Argument(..., help=f"What the file holds: {', '.join(SOURCES)}."),
    path: Path = typer.Argument(..., help="The file (ib-sysfs: a /sys/class/infiniband "
                                          "directory; psi: a directory with cpu, memory and io "
                                          "pressure files)."),
    host: str = typer.Option(..., "--host", help="The topology host id the output is from."),
    t_ns: int = typer.Option(0, "--t-ns", help="Time of the reading (ns; default now). "
                                               "Kernel events all get this time."),
    gpu_map: str = typer.Option("", "--gpu-map", help="PCI=GPU id pairs (0000:db:00=node3/"
                                                      "gpu7); default HOST/gpuINDEX."),
    nic_map: str = typer.Option("", "--nic-map", help="IB port=NIC id pairs "
                                                      "(mlx5_0/1=node3/nic0)."),
) -> None:
    """Print recorded node-health output as health records (JSON Lines)."""
    from collectors.health.errors import HealthParseError
    from collectors.sidecar.ports import parse_nic_map

    try:
        for rec in _records(source, path, host, t_ns or time.time_ns(), gpu_map,
                            parse_nic_map(nic_map)):
            sys.stdout.buffer.write(orjson.dumps(rec.to_json()) + b"\n")
    except (HealthParseError, OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _records(source: str, path: Path, host: str, t: int, gpu_map: str,
             nic_map: dict[str, str]) -> list:
    from collectors.health import records as rec
    from collectors.health.gpu import pci_key
    from collectors.health.settings import parse_gpu_map

    by_pci = dict(parse_gpu_map(gpu_map))

    def gpus(samples: list) -> list:
        out = []
        for i, g in enumerate(samples):
            try:
                ident = by_pci.get(pci_key(g.bus_id)) if g.bus_id else None
            except ValueError:
                ident = None
            ident = ident or f"{host}/gpu{g.index if g.index is not None else i}"
            if g.values or g.reasons:
                out.append(rec.gpu_record(host, ident, t, g))
        return out

    if source == "smi-text":
        from collectors.health.smi_text import parse_smi_text
        return gpus(parse_smi_text(path.read_text(), str(path)))
    if source == "smi-xml":
        from collectors.health.smi_xml import parse_smi_xml
        return gpus(parse_smi_xml(path.read_bytes(), str(path)))
    if source == "query-gpu":
        from collectors.health.smi_csv import parse_query_gpu_csv
        return gpus(parse_query_gpu_csv(path.read_text(), str(path)))
    if source == "dcgm-scrape":
        from collectors.health.dcgm import parse_exporter_scrape
        return gpus(parse_exporter_scrape(path.read_text(), str(path)))
    if source == "dcgmi-diag":
        from collectors.health.dcgm import parse_dcgmi_diag
        ids = {int(i.rsplit("gpu", 1)[1]): i for i in by_pci.values()
               if i.rsplit("gpu", 1)[-1].isdigit()}
        return rec.diag_records(host, t, parse_dcgmi_diag(path.read_text(), str(path)), ids)
    if source == "kernel":
        from collectors.health.kernel import parse_kernel_log
        out = []
        for e in parse_kernel_log(path.read_text()):
            try:
                component = by_pci.get(pci_key(e.device), "") if e.device else ""
            except ValueError:
                component = ""
            if (r := rec.event_record(host, component, t, e)) is not None:
                out.append(r)
        return out
    if source == "ib-sysfs":
        from collectors.health.infiniband import read_ib_sysfs
        return [rec.ib_record(host, nic_map.get(p.name, f"{host}/{p.name}"), t, p)
                for p in read_ib_sysfs(path)]
    if source == "psi":
        from collectors.health.host import parse_psi
        psi = {r: parse_psi((path / r).read_text(), str(path / r))
               for r in ("cpu", "memory", "io") if (path / r).exists()}
        r = rec.host_record(host, t, psi)
        return [r] if r is not None else []
    raise ValueError(f"source {source!r} is not one of {', '.join(SOURCES)}")


def register(app: typer.Typer) -> None:
    health_app = typer.Typer(help="Node health: what c4 reads from a node's own tools.",
                             no_args_is_help=True)
    health_app.command("records")(records)
    app.add_typer(health_app, name="health")
