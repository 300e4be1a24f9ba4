"""Parsed health readings → ``health`` records (c4/proto/health.py), named by topology ids.

The sidecar calls these after each read; tests and the simulator call them on recorded files.
``component`` is the topology id of the GPU or NIC (the sidecar maps PCI addresses and RDMA
ports to them); empty means the host itself.
"""

from __future__ import annotations

from c4.proto.health import EVENTS, HealthRecord
from collectors.health.dcgm import DiagRow
from collectors.health.gpu import GpuSample
from collectors.health.host import Psi
from collectors.health.infiniband import IbPort
from collectors.health.kernel import KernelEvent

#: the IB port values a record carries (sysfs names; the rules watch the error ones climb)
IB_VALUES = ("symbol_error", "port_rcv_errors", "link_downed", "link_error_recovery",
             "local_link_integrity_errors", "port_rcv_remote_physical_errors",
             "port_xmit_discards", "port_xmit_wait")
IB_HW_VALUES = ("local_ack_timeout_err", "out_of_sequence", "packet_seq_err")


def gpu_record(host: str, component: str, t_ns: int, g: GpuSample) -> HealthRecord:
    return HealthRecord(host, t_ns, component, dict(g.values), tuple(sorted(g.reasons)))


def ib_record(host: str, component: str, t_ns: int, p: IbPort) -> HealthRecord:
    values: dict[str, float] = {"up": 1.0 if p.up else 0.0}
    if p.rate_gbps is not None:
        values["rate_gbps"] = p.rate_gbps
    values.update({k: float(p.counters[k]) for k in IB_VALUES if k in p.counters})
    values.update({k: float(p.hw_counters[k]) for k in IB_HW_VALUES if k in p.hw_counters})
    return HealthRecord(host, t_ns, component, values)


def host_record(host: str, t_ns: int, psi: dict[str, Psi],
                steal_pct: float | None = None) -> HealthRecord | None:
    """PSI files by resource (``cpu``, ``memory``, ``io``) and CPU steal; None if none read."""
    values: dict[str, float] = {}
    for resource, p in psi.items():
        if p.some is not None:
            values[f"psi_{resource}_some_avg10"] = p.some.avg10
        if p.full is not None and resource != "cpu":   # system cpu "full" is always 0
            values[f"psi_{resource}_full_avg10"] = p.full.avg10
    if steal_pct is not None:
        values["cpu_steal_pct"] = steal_pct
    return HealthRecord(host, t_ns, "", values) if values else None


def diag_records(host: str, t_ns: int, rows: list[DiagRow],
                 gpu_ids: dict[int, str] | None = None) -> list[HealthRecord]:
    """``dcgmi diag`` results worth a record: each test that failed (one record per failing
    GPU it names, the GPU by ``gpu_ids`` else ``<host>/gpu<i>``; the host when it names none)
    and each Error / Warning row, as ``dcgm_diag`` events (code: the GPU index, if any)."""
    out: list[HealthRecord] = []
    seen: set[tuple[str, str]] = set()     # a table printed twice (two srun tasks) counts once
    for row in rows:
        if row.name in ("Error", "Warning"):
            key = (row.name, row.text)
            if key not in seen:
                seen.add(key)
                out.append(HealthRecord(host, t_ns, "", event="dcgm_diag",
                                        text=f"{row.name}: {row.text}"))
            continue
        failed = row.results.get("Fail", "absent")
        if failed == "absent":
            continue
        for gpu in failed or [None]:
            key = (row.name, str(gpu))
            if key in seen:
                continue
            seen.add(key)
            component = "" if gpu is None else (gpu_ids or {}).get(gpu, f"{host}/gpu{gpu}")
            out.append(HealthRecord(host, t_ns, component, event="dcgm_diag", code=gpu,
                                    text=f"{row.section + ' / ' if row.section else ''}"
                                         f"{row.name}: Fail"))
    return out


def event_record(host: str, component: str, t_ns: int, e: KernelEvent) -> HealthRecord | None:
    """A kernel event worth shipping; None for context lines (``gpu_identity``)."""
    if e.kind not in EVENTS:
        return None
    text = e.text
    if e.kind == "aer":
        text = f"{e.detail.get('severity', '')}, {e.detail.get('type', '')}"
    return HealthRecord(host, t_ns, component, event=e.kind, code=e.code, text=text)
