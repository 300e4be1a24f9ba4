"""The report's figures, drawn with matplotlib's Agg backend and returned as inline SVG (raster
parts such as heatmaps are embedded by matplotlib as base64 PNG inside the SVG)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from c4.proto.codec import Columns
from diagnosis.report_html.data import ReportData

MAX_ROWS = 512        # heatmap / matrix rows before ranks are grouped into bands
TIME_BINS = 240
FAULT_COLOURS = {"noncomm_hang": "#b2182b", "comm_hang": "#d6604d", "noncomm_slow": "#f4a582",
                 "comm_slow": "#fdae61", "error": "#762a83"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9})
    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _plt().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]     # drop the XML prologue and doctype: inline SVG


def lateness(ops: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per collective call (same process group and sequence number): each rank's enter time
    minus the call's median enter time. Returns (call time ns, rank, skew ms) per record."""
    if not len(ops):
        return None
    coll = ops["peer"] < 0
    if not coll.any():
        return None
    pg, seq = ops["pg"][coll].astype(np.int64), ops["seq"][coll]
    enter, rank = ops["t_enter_ns"][coll], ops["rank"][coll]
    _, call = np.unique(np.stack([pg, seq]), axis=1, return_inverse=True)
    call = call.ravel()
    order = np.lexsort((enter, call))
    counts = np.bincount(call)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sorted_enter = enter[order]
    lo = sorted_enter[starts + (counts - 1) // 2]
    hi = sorted_enter[starts + counts // 2]
    median = (lo // 2 + hi // 2)
    skew_ms = (enter - median[call]) / 1e6
    keep = counts[call] > 1          # a call seen from one rank only has no skew to show
    return median[call][keep], rank[keep], skew_ms[keep]


def lateness_heatmap(ops: Columns, faults: list | tuple = ()) -> tuple[str, str] | None:
    """Ranks x time, colour = mean arrival skew (ms) of the rank's calls in that time bin, the
    faults' spans shaded over it: a hang is a gap without calls, which colour alone leaves
    blank."""
    got = lateness(ops)
    if got is None or not len(got[0]):
        return None
    from scipy.stats import binned_statistic_2d

    t_ns, rank, skew = got
    t0 = int(t_ns.min())
    t = (t_ns - t0) / 1e9
    nranks = int(rank.max()) + 1
    band = max(1, -(-nranks // MAX_ROWS))
    rows = -(-nranks // band)
    tbins = min(TIME_BINS, max(1, len(np.unique(t_ns))))
    stat, _, _, _ = binned_statistic_2d(rank // band, t, skew, "mean",
                                        bins=[rows, tbins],
                                        range=[[0, rows], [0, max(float(t.max()), 1e-9)]])
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, min(9, 2.5 + rows * 0.12)))
    from matplotlib.colors import SymLogNorm

    # linear over the usual skews, logarithmic beyond: a 20 s wait stands out from 4 ms ones
    # instead of being clipped to the same colour
    limit = float(np.nanpercentile(np.abs(skew), 99)) or 1.0
    top_abs = max(float(np.nanmax(np.abs(skew))), limit * 1.0001)
    img = ax.imshow(stat, aspect="auto", origin="lower", cmap="RdBu_r",
                    norm=SymLogNorm(linthresh=limit, vmin=-top_abs, vmax=top_abs, base=10),
                    interpolation="nearest", extent=[0, float(t.max()) or 1.0, 0, rows * band])
    spans = 0
    for f in faults:
        a = (int(f.first_seen_ns) - t0) / 1e9
        b = (int(f.last_seen_ns or f.first_seen_ns) - t0) / 1e9
        if b < 0 or a > float(t.max()):
            continue
        ax.axvspan(max(a, 0.0), max(b, a + float(t.max()) / 500), alpha=0.25,
                   color=FAULT_COLOURS.get(f.kind, "#999999"), lw=0)
        ax.text(max(a, 0.0), rows * band, f" {f.kind}", va="bottom", ha="left", fontsize=7,
                color=FAULT_COLOURS.get(f.kind, "#555555"), clip_on=False)
        spans += 1
    ax.set_xlabel("seconds since the first call")
    ax.set_ylabel("rank" if band == 1 else f"rank (bands of {band})")
    fig.colorbar(img, ax=ax, label="arrival skew vs the call's median enter (ms)")
    worst = np.bincount(rank, weights=skew) / np.maximum(np.bincount(rank), 1)
    top = int(np.argmax(worst))
    caption = (f"{len(skew):,} arrivals at {len(np.unique(t_ns)):,} collective calls. Red is "
               f"late, blue early (linear up to {limit:.3g} ms, logarithmic beyond, to "
               f"{top_abs:.3g} ms). Latest on average: rank {top}, {worst[top]:+.3f} ms."
               + (f" Shaded: the spans of {spans} fault report(s)." if spans else ""))
    return _svg(fig), caption


def transfer_matrix(data: ReportData) -> tuple[str, str] | None:
    """Source x destination, colour = median transfer rate (Gbit/s) of that connection."""
    tr = data.transfers
    if tr is None or not len(tr.src):
        return None
    n = int(max(tr.src.max(), tr.dst.max())) + 1
    band = max(1, -(-n // MAX_ROWS))
    size = -(-n // band)
    gbps = tr.nbytes * 8 / tr.seconds / 1e9
    cell = (tr.src // band) * size + tr.dst // band
    order = np.lexsort((gbps, cell))
    cells, starts, counts = np.unique(cell[order], return_index=True, return_counts=True)
    med = gbps[order][starts + (counts - 1) // 2]
    grid = np.full(size * size, np.nan)
    grid[cells] = med
    grid = grid.reshape(size, size)
    plt = _plt()
    from matplotlib.colors import LogNorm

    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    positive = med[med > 0]
    norm = LogNorm(vmin=float(positive.min()), vmax=float(positive.max())) \
        if len(positive) and positive.min() < positive.max() else None
    img = ax.imshow(grid, origin="lower", cmap="viridis", norm=norm, interpolation="nearest",
                    extent=[0, size * band, 0, size * band])
    ax.set_xlabel("destination rank" if band == 1 else f"destination rank (bands of {band})")
    ax.set_ylabel("source rank" if band == 1 else f"source rank (bands of {band})")
    fig.colorbar(img, ax=ax, label="median transfer rate (Gbit/s)")
    slow = int(np.nanargmin(grid))
    s, d = divmod(slow, size)
    caption = (f"{len(gbps):,} transfers on {len(cells):,} connections, from "
               f"{tr.source}. Slowest connection: {s * band} -> {d * band} at "
               f"{grid.flat[slow]:.3g} Gbit/s (median over all: {np.median(med):.3g}).")
    return _svg(fig), caption


def _suspect_nodes(data: ReportData) -> tuple[set[str], set[tuple[str, str]]]:
    """Topology nodes and links named by the faults' suspects (ranks mapped to their GPU or
    host)."""
    nodes: set[str] = set()
    links: set[tuple[str, str]] = set()
    for f in data.faults:
        for s in f.suspects[:3]:
            if s.type == "link" and "~" in s.id:
                a, b = s.id.split("~", 1)
                links.add((a, b))
            elif s.type == "rank":
                r = s.rank if s.rank is not None else (int(s.id) if s.id.isdigit() else None)
                if r is not None:
                    nodes.add(data.gpus.get(r) or data.hosts.get(r, ""))
            else:
                nodes.add(s.id)
    return nodes - {""}, links


def topology_figure(data: ReportData) -> tuple[str, str] | None:
    topo = data.topology
    if topo is None:
        return None
    import networkx as nx

    g = topo.graph
    layer = {"core": 0, "spine": 1, "leaf": 2}
    big = g.number_of_nodes() > 600
    keep = [n for n, a in g.nodes(data=True) if not (big and a.get("kind") == "gpu")]
    from c4.topology.model import natural_key

    # a fresh graph, nodes in natural order (gpu2 before gpu10), so each row reads in order
    # and the layers below do not touch the topology
    sub = nx.Graph()
    sub.add_nodes_from((n, dict(g.nodes[n])) for n in sorted(keep, key=natural_key))
    sub.add_edges_from(g.subgraph(keep).edges)
    for _, a in sub.nodes(data=True):
        kind = a.get("kind")
        a["layer"] = (layer.get(a.get("tier"), 2) if kind == "switch"
                      else {"nic": 3, "host": 4, "gpu": 5}.get(kind, 5))
    # layered layout: one row per tier, each row in natural order, spread over the width
    rows: dict[int, list[str]] = {}
    for n, a in sub.nodes(data=True):
        rows.setdefault(a["layer"], []).append(n)
    pos = {n: ((i + 0.5) / len(members), -float(lay))
           for lay, members in rows.items() for i, n in enumerate(members)}
    bad_nodes, bad_links = _suspect_nodes(data)
    colours = {"switch": "#4575b4", "nic": "#74add1", "host": "#999999", "gpu": "#abd9e9"}
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 6))
    edge_bad = [e for e in sub.edges if e in bad_links or e[::-1] in bad_links]
    nx.draw_networkx_edges(sub, pos, ax=ax, edge_color="#cccccc", width=0.6)
    if edge_bad:
        nx.draw_networkx_edges(sub, pos, edgelist=edge_bad, ax=ax, edge_color="#d7191c",
                               width=3)
    node_colour = ["#d7191c" if n in bad_nodes else colours.get(sub.nodes[n].get("kind"),
                                                                "#999999") for n in sub]
    size = [90 if n in bad_nodes else 25 for n in sub]
    nx.draw_networkx_nodes(sub, pos, ax=ax, node_color=node_colour, node_size=size)
    # label the rows that stay legible: switches and hosts (NICs and GPUs only when few)
    few = sub.number_of_nodes() <= 40
    labels = {n: n for n, a in sub.nodes(data=True)
              if (few or a.get("kind") in ("switch", "host")) and n not in bad_nodes}
    if len(labels) <= 120:
        nx.draw_networkx_labels(sub, pos, labels=labels, ax=ax, font_size=6,
                                verticalalignment="bottom")
    for n in bad_nodes & set(sub):
        ax.annotate(n, pos[n], xytext=(4, 6), textcoords="offset points", color="#d7191c",
                    fontsize=9, fontweight="bold")
    ax.set_axis_off()
    named = sorted(bad_nodes) + [f"{a}~{b}" for a, b in sorted(bad_links)]
    caption = (f"{g.number_of_nodes():,} nodes, {g.number_of_edges():,} links"
               + (" (GPUs not drawn)" if big else "") + ". Suspects in red: "
               + (", ".join(named[:8]) if named else "none") + ".")
    return _svg(fig), caption


def timeline_figure(data: ReportData) -> tuple[str, str] | None:
    rows: list[tuple[str, list[tuple[int, int]], str, list[tuple[int, str]]]] = []
    for f in sorted(data.faults, key=lambda f: f.first_seen_ns):
        end = max(f.last_seen_ns, f.first_seen_ns)
        top = f.top.id if f.top else "?"
        rows.append((f"{f.kind}: {top}", [(f.first_seen_ns, end)],
                     FAULT_COLOURS.get(f.kind, "#888888"), []))
    for r in data.recoveries:
        times = sorted(r.at.items(), key=lambda kv: kv[1])
        span = [(times[0][1], times[-1][1])] if times else []
        rows.append((f"recovery {r.id}: {r.node} ({r.state})", span, "#c7e9c0",
                     [(t, name) for name, t in times]))
    if not rows:
        return None
    t0 = min(min((a for a, _ in spans), default=0) for _, spans, _, _ in rows if spans)
    t1 = max(max((b for _, b in spans), default=0) for _, spans, _, _ in rows if spans)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.45 * len(rows)))
    width = max((t1 - t0) / 1e9, 1e-3)
    for y, (_, spans, colour, marks) in enumerate(rows):
        for a, b in spans:
            ax.broken_barh([((a - t0) / 1e9, max((b - a) / 1e9, width / 300))], (y - 0.3, 0.6),
                           facecolors=colour)
        for t, name in marks:
            ax.plot((t - t0) / 1e9, y, "k|", markersize=12)
            ax.annotate(name, ((t - t0) / 1e9, y - 0.05), fontsize=7, rotation=30,
                        color="#1b5e20")
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first event")
    ax.grid(axis="x", color="#eeeeee")
    caption = (f"{len(data.faults)} fault report(s) from first seen to last seen"
               + (f", {len(data.recoveries)} recovery(ies) with their phases" if data.recoveries
                  else "") + ".")
    return _svg(fig), caption
