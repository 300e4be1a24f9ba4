"""``nvidia-smi topo -m`` (and ``-mp``): the matrix of how each GPU reaches each other GPU and
each NIC, read however it was saved: TAB- or space-separated, CRLF line ends, the header
underlined with ANSI escapes, inside a longer capture, or a terminal paste that lost the header's
NIC columns (then the NIC rows, which the matrix mirrors, give the distances).

Which NIC a GPU uses is not in the output: :func:`pair_gpus` chooses it the way NCCL does, the
nearest NIC (``PIX`` before ``PXB``, ``PHB``, ``NODE``, ``SYS``), spreading GPUs over NICs that
are equally near."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from c4.topology.importers.common import (
    INFO,
    WARNING,
    Issue,
    TopologyImportError,
    read_text,
)

#: PCIe distances, nearest first (SOC: very old drivers' SYS)
DISTANCES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_RANK = {**{d: i for i, d in enumerate(DISTANCES)}, "SOC": DISTANCES.index("SYS")}
_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+"
                     r"|(mlx|bnxt_re|irdma|efa_|erdma_|hfi|qib|rxe|mthca|cxgb)\w*\d)$")
_LEGEND_NIC = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_GOOD_NIC = ("PIX", "PXB")


@dataclass
class GpuMatrix:
    """What a ``topo -m`` says about one host."""

    gpus: list[int] = field(default_factory=list)
    nics: list[str] = field(default_factory=list)            # device names (legend applied)
    #: (gpu index, nic name) -> PCIe distance (PIX, PXB, PHB, NODE, SYS)
    distance: dict[tuple[int, str], str] = field(default_factory=dict)
    nvlink: dict[tuple[int, int], str] = field(default_factory=dict)   # GPU pair -> NV#/PIX..
    numa: dict[int, int] = field(default_factory=dict)
    cpus: dict[int, str] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)


def read_matrix(path: str | Path) -> GpuMatrix:
    return parse(read_text(path), str(path))


def parse(text: str, source: str) -> GpuMatrix:
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    head = next((i for i, ln in enumerate(lines) if _is_header(ln)), None)
    if head is None:
        raise TopologyImportError(
            "no nvidia-smi topo -m matrix: expected a header line with GPU0 … and 'CPU "
            "Affinity' (give the output of 'nvidia-smi topo -m')", source=source)
    out = GpuMatrix()
    columns = [c for c in _split(lines[head]) if _DEVICE.match(c)]
    rows: dict[str, list[str]] = {}
    row_line: dict[str, int] = {}
    legend: dict[str, str] = {}
    after: dict[str, list[str]] = {}
    i = head + 1
    while i < len(lines):
        ln = lines[i]
        if ln.strip().startswith("Legend"):
            break
        tokens = ln.split()
        if tokens and _DEVICE.match(tokens[0]):
            label, cells = tokens[0], tokens[1:]
            n = sum(1 for _ in _takewhile_cells(cells, len(columns)))
            rows[label], after[label], row_line[label] = cells[:n], cells[n:], i + 1
        elif tokens:
            out.issues.append(Issue(WARNING, f"not a matrix row: {ln.strip()[:60]!r}: skipped",
                                    source, i + 1))
        i += 1
    for ln in lines[i:]:
        m = _LEGEND_NIC.match(ln)
        if m:
            legend[m.group(1)] = m.group(2)
    _fill(out, columns, rows, row_line, after, legend, source)
    return out


def _is_header(line: str) -> bool:
    cols = _split(line)
    return "GPU0" in cols and any(c.startswith("CPU Affinity") for c in cols)


def _split(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"\t| {2,}", line.strip()) if c.strip()]


def _takewhile_cells(cells: list[str], limit: int) -> Iterator[str]:
    for c in cells[:limit]:
        if not _CELL.match(c):
            return
        yield c


def _fill(out: GpuMatrix, columns: list[str], rows: dict[str, list[str]],
          row_line: dict[str, int], after: dict[str, list[str]], legend: dict[str, str],
          source: str) -> None:
    def name(label: str) -> str:
        return legend.get(label, label)

    gpu_labels = [c for c in columns if c.startswith("GPU")]
    nic_labels = [c for c in columns if not c.startswith("GPU")]
    extra = [r for r in rows if not r.startswith("GPU") and r not in nic_labels]
    if extra:
        out.issues.append(Issue(WARNING, f"the header has no column for {', '.join(extra)}, "
                                "though rows for them follow (a truncated paste?): their "
                                "distances to the GPUs are read from their own rows", source,
                                row_line[extra[0]]))
        nic_labels += extra
    out.gpus = [int(g[3:]) for g in gpu_labels]
    out.nics = [name(n) for n in nic_labels]
    if any(n.startswith("NIC") for n in out.nics):
        out.issues.append(Issue(WARNING, "no 'NIC Legend' maps NIC0… to device names: the NICs "
                                "keep nvidia-smi's labels and cannot be matched with "
                                "ibdev2netdev or the fabric", source))
    for label, cells in rows.items():
        if len(cells) < len(columns) and label.startswith("GPU"):
            out.issues.append(Issue(WARNING, f"row {label} has {len(cells)} of {len(columns)} "
                                    "cells (cut?)", source, row_line[label]))
        for col, cell in zip(columns, cells):
            _record(out, label, col, cell, name)
    cut = [label for label, rest in after.items()
           if label.startswith("GPU") and not _affinity(out, int(label[3:]), rest)]
    if cut:
        out.issues.append(Issue(INFO, f"the CPU affinity of {', '.join(cut)} is cut (a "
                                "truncated paste?): left out", source, row_line[cut[0]]))
    missing = [g for g in gpu_labels if g not in rows]
    if missing:
        out.issues.append(Issue(WARNING, f"no row for {', '.join(missing)}", source))


def _record(out: GpuMatrix, row: str, col: str, cell: str,
            name: Callable[[str], str]) -> None:
    if cell == "X" or row == col:
        return
    if row.startswith("GPU") and col.startswith("GPU"):
        a, b = sorted((int(row[3:]), int(col[3:])))
        out.nvlink[(a, b)] = cell
        return
    if row.startswith("GPU") or col.startswith("GPU"):
        gpu, nic = (row, col) if row.startswith("GPU") else (col, row)
        out.distance.setdefault((int(gpu[3:]), name(nic)), "SYS" if cell == "SOC" else cell)


def _affinity(out: GpuMatrix, gpu: int, rest: list[str]) -> bool:
    """Read a GPU row's CPU list and NUMA node; False when the CPU list is cut short."""
    ok = True
    if rest and _CPULIST.match(rest[0]):
        out.cpus[gpu] = rest[0]
        rest = rest[1:]
    elif rest and re.match(r"^[\d,-]+$", rest[0]) and len(rest) > 1:
        ok, rest = False, rest[1:]
    if rest and rest[0].isdigit():
        out.numa[gpu] = int(rest[0])
    return ok


def pair_gpus(matrix: GpuMatrix, usable: list[str] | None = None
              ) -> tuple[dict[int, tuple[str, str]], list[Issue]]:
    """GPU index -> (NIC name, distance): each GPU's nearest NIC among ``usable`` (default: all
    the matrix's NICs), GPUs with the nearest NICs placed first, a tie going to the NIC that
    serves fewest GPUs so far (then the first listed). The issues say which GPUs have no NIC
    nearer than a host bridge (GPUDirect RDMA suffers)."""
    nics = [n for n in matrix.nics if usable is None or n in usable]
    out: dict[int, tuple[str, str]] = {}
    issues: list[Issue] = []
    if not nics:
        return out, issues
    load = dict.fromkeys(nics, 0)
    best: dict[int, int] = {}
    for g in matrix.gpus:
        ranks = [_RANK[matrix.distance[(g, n)]] for n in nics if (g, n) in matrix.distance]
        if ranks:
            best[g] = min(ranks)
    for g in sorted(best, key=lambda g: (best[g], g)):
        near = [n for n in nics if _RANK.get(matrix.distance.get((g, n), ""), 99) == best[g]]
        nic = min(near, key=lambda n: (load[n], nics.index(n)))
        load[nic] += 1
        out[g] = (nic, DISTANCES[best[g]])
    far = sorted(g for g, (_, d) in out.items() if d not in _GOOD_NIC)
    if far:
        issues.append(Issue(INFO, f"GPU {', '.join(map(str, far))} reach no NIC through PCIe "
                            "switches alone (nearest: "
                            f"{', '.join(sorted({out[g][1] for g in far}))}): paired with the "
                            "nearest, shared evenly"))
    return out, issues
