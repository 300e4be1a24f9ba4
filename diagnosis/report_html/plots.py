"""The report's figures, drawn with matplotlib's Agg backend and returned as inline SVG (raster
parts such as heatmaps are embedded by matplotlib as base64 PNG inside the SVG)."""

from __future__ import annotations

import io
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4.proto.codec import Columns
from diagnosis.report_html.data import ReportData

MAX_ROWS = 512        # heatmap / matrix rows before ranks are grouped into bands
TIME_BINS = 240
NO_DATA = "#ececec"   # cells without calls: grey, apart from white (no skew)
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


Lateness = tuple[np.ndarray, np.ndarray, np.ndarray]   # call time ns, rank, skew ms


def lateness(ops: Columns) -> Lateness | None:
    """Per collective call (same process group and sequence number): each rank's enter time
    minus the call's median enter time. Returns (call time ns, rank, skew ms) per record."""
    if not len(ops):
        return None
    coll = ops["peer"] < 0
    if not coll.any():
        return None
    pg, seq = ops["pg"][coll].astype(np.int64), ops["seq"][coll].astype(np.int64)
    enter, rank = ops["t_enter_ns"][coll], ops["rank"][coll]
    # one integer per (group, call): a 1-D unique, many times faster than unique(axis=1)
    first = int(seq.min())
    _, call = np.unique(pg * (int(seq.max()) - first + 1) + (seq - first), return_inverse=True)
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


@dataclass(frozen=True)
class Rows:
    """How a heatmap groups ranks into rows: per rank, its row; the rows' names; the axis."""

    of_rank: np.ndarray
    labels: list[str]
    axis: str
    #: a row is its latest rank's (a host: one slow GPU of eight, averaged with its peers,
    #: fades into the fleet's noise); else the mean of its ranks (a rail: a fault of the rail
    #: shows in all of them, the latest of hundreds is always someone's one-off pause)
    latest: bool = False
    #: rows named by the faults' suspects, named in red
    marked: frozenset[str] = frozenset()


def _row_ticks(ax: Any, labels: list[str], marked: Set[str] = frozenset(),
               most: int = 24) -> None:
    """Name at most ``most`` rows, evenly spread (names that would overlap are left out), and
    every row in ``marked`` (the suspects'), in red, instead of the names next to it."""
    step = max(1, -(-len(labels) // most))
    hot = [i for i, name in enumerate(labels) if name in marked]
    ticks = sorted(set(hot) | {t for t in range(0, len(labels), step)
                               if all(abs(t - h) >= step for h in hot)})
    ax.set_yticks([t + 0.5 for t in ticks], [labels[t] for t in ticks], fontsize=7)
    for t, label in zip(ticks, ax.get_yticklabels(), strict=True):
        if t in hot:
            label.set_color("#d7191c")
            label.set_fontweight("bold")


def lateness_heatmap(ops: Columns, faults: list | tuple = (), rows: Rows | None = None,
                     late: Lateness | None = None) -> tuple[str, str] | None:
    """Ranks (or the hosts or rails of ``rows``) x time, colour = mean arrival skew (ms) of
    the calls in that time bin, the faults' spans shaded over it: a hang is a gap without
    calls, which colour alone leaves blank. ``late``: ``lateness(ops)``, when known."""
    got = late if late is not None else lateness(ops)
    if got is None or not len(got[0]):
        return None
    t_ns, rank, skew = got
    t0 = int(t_ns.min())
    t = (t_ns - t0) / 1e9
    nranks = int(rank.max()) + 1
    if rows is None:
        band = max(1, -(-nranks // MAX_ROWS))
        nrows = -(-nranks // band)
        row, height = rank // band, nrows * band
    else:
        band, nrows = 1, len(rows.labels)
        row, height = rows.of_rank[rank], nrows
    # about two calls of each rank per bin: narrower bins leave most cells of a rank empty
    calls_per_rank = len(skew) / max(len(np.unique(rank)), 1)
    tbins = int(min(TIME_BINS, len(np.unique(t_ns)), max(1, calls_per_rank // 2)))
    if rows is None or not rows.latest:
        stat = _mean_grid(row, t, skew, nrows, tbins)
    else:
        per_rank = _mean_grid(rank, t, skew, nranks, tbins)
        stat = np.full((nrows, tbins), -np.inf)
        np.fmax.at(stat, rows.of_rank[:nranks], per_rank)
        stat[np.isinf(stat)] = np.nan
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, min(9, 2.5 + nrows * 0.12)))
    from matplotlib.colors import SymLogNorm

    # linear over the usual skews, logarithmic beyond: a 20 s wait stands out from 4 ms ones
    # instead of being clipped to the same colour
    limit = float(np.nanpercentile(np.abs(skew), 99)) or 1.0
    top_abs = max(float(np.nanmax(np.abs(skew))), limit * 1.0001)
    cmap = _plt().get_cmap("RdBu_r").with_extremes(bad=NO_DATA)
    img = ax.imshow(stat, aspect="auto", origin="lower", cmap=cmap,
                    norm=SymLogNorm(linthresh=limit, vmin=-top_abs, vmax=top_abs, base=10),
                    interpolation="nearest", extent=[0, float(t.max()) or 1.0, 0, height])
    spans = _shade_faults(ax, faults, t0, float(t.max()), height)
    ax.set_xlabel("seconds since the first call")
    if rows is None:
        ax.set_ylabel("rank" if band == 1 else f"rank (bands of {band})")
        if band == 1:
            # ranks named at the middle of their rows (not 0.5-steps of a continuous axis),
            # the suspects' in red
            from c4.report import suspect_ranks

            _row_ticks(ax, [str(r) for r in range(nrows)],
                       {str(r) for f in faults for r in suspect_ranks(f)})
    else:
        ax.set_ylabel(rows.axis)
        _row_ticks(ax, rows.labels, rows.marked)
    # plain numbers on the colour bar: a log scale's default 10^k labels go through
    # matplotlib's math-text parser, a second of a large page for eight labels
    fig.colorbar(img, ax=ax, label="arrival skew vs the call's median enter (ms)",
                 format="%.3g")
    if rows is None:
        worst = np.bincount(rank, weights=skew) / np.maximum(np.bincount(rank), 1)
        top = int(np.argmax(worst))
        latest = f"rank {top}, {worst[top]:+.3f} ms"
    else:
        worst = np.bincount(row, weights=skew, minlength=nrows) / np.maximum(
            np.bincount(row, minlength=nrows), 1)
        top = int(np.argmax(worst))
        noun, name = rows.axis.split(" ")[0], rows.labels[top]
        # rails are labelled "rail 1" already: not "rail rail 1"
        latest = f"{name if name.startswith(noun) else f'{noun} {name}'}, {worst[top]:+.3f} ms"
    scale = (f"linear up to {limit:.3g} ms, logarithmic beyond, to {top_abs:.3g} ms"
             if top_abs > limit * 1.01 else f"linear to {top_abs:.3g} ms")
    caption = (f"{len(skew):,} arrivals at {len(np.unique(t_ns)):,} collective calls. Red is "
               f"late, blue early ({scale}; grey: no call)."
               + ("" if rows is None else f" Each {rows.axis.split(' ')[0]}'s row shows "
                  + ("its latest rank" if rows.latest else "the mean of its ranks")
                  + " in each time bin.")
               + f" Latest on average: {latest}."
               + (f" Shaded: the spans of {spans} fault report(s)." if spans else ""))
    return _svg(fig), caption


def _mean_grid(row: np.ndarray, t: np.ndarray, value: np.ndarray, nrows: int,
               tbins: int) -> np.ndarray:
    """Rows x time bins (equal widths from 0 to t's largest), the mean value in each cell,
    NaN where none fell."""
    span = max(float(t.max()), 1e-9)
    tbin = np.minimum((t / span * tbins).astype(np.int64), tbins - 1)
    cell = row.astype(np.int64) * tbins + tbin
    sums = np.bincount(cell, weights=value, minlength=nrows * tbins)
    counts = np.bincount(cell, minlength=nrows * tbins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (sums / np.where(counts, counts, np.nan)).reshape(nrows, tbins)


def latest_ranks(late: Lateness, n: int = 10) -> list[tuple[int, float, int]]:
    """The ``n`` ranks latest on average: (rank, mean skew ms, calls)."""
    _, rank, skew = late
    calls = np.bincount(rank)
    mean = np.bincount(rank, weights=skew) / np.maximum(calls, 1)
    seen = np.flatnonzero(calls)
    top = seen[np.argsort(-mean[seen], kind="stable")[:n]]
    return [(int(r), float(mean[r]), int(calls[r])) for r in top]


def _shade_faults(ax: Any, faults: list | tuple, t0: int, t_max: float, top: float) -> int:
    """Each fault's span from first to last seen over a time axis; its kind named above the
    plot, staggered so that the names of faults close in time do not print over each other."""
    spans = 0
    placed: list[float] = []
    for f in sorted(faults, key=lambda f: f.first_seen_ns):
        a = (int(f.first_seen_ns) - t0) / 1e9
        b = (int(f.last_seen_ns or f.first_seen_ns) - t0) / 1e9
        if b < 0 or a > t_max:
            continue
        colour = FAULT_COLOURS.get(f.kind, "#999999")
        ax.axvspan(max(a, 0.0), max(b, a + t_max / 500), alpha=0.25, color=colour, lw=0)
        spans += 1
        close = sum(1 for p in placed if abs(p - a) < t_max / 12)
        if close < 3:
            ax.annotate(f" {f.kind}", (max(a, 0.0), top), xytext=(0, 2 + 9 * close),
                        textcoords="offset points", va="bottom", ha="left", fontsize=7,
                        color=colour, annotation_clip=False)
            placed.append(a)
    return spans


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
    flat = np.full(size * size, np.nan)
    flat[cells] = med
    grid = flat.reshape(size, size)
    plt = _plt()
    from matplotlib.colors import LogNorm

    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    positive = med[med > 0]
    # logarithmic only over a range that needs it: log ticks over a few per cent are noise
    norm = LogNorm(vmin=float(positive.min()), vmax=float(positive.max())) \
        if len(positive) and positive.max() > 10 * positive.min() else None
    img = ax.imshow(grid, origin="lower", cmap="viridis", norm=norm, interpolation="nearest",
                    extent=[0, size * band, 0, size * band])
    ax.set_xlabel("destination rank" if band == 1 else f"destination rank (bands of {band})")
    ax.set_ylabel("source rank" if band == 1 else f"source rank (bands of {band})")
    fig.colorbar(img, ax=ax, label="median transfer rate (Gbit/s)", format="%.3g")
    slow = int(np.nanargmin(grid))
    s, d = divmod(slow, size)
    caption = (f"{len(gbps):,} transfers on {len(cells):,} connections, from "
               f"{tr.source}. Slowest connection: {s * band} -> {d * band} at "
               f"{grid.flat[slow]:.3g} Gbit/s (median over all: {np.median(med):.3g}).")
    return _svg(fig), caption


@dataclass(frozen=True)
class Connection:
    """One source -> destination pair of ranks and what its transfers achieved."""

    src: int
    dst: int
    transfers: int
    gbps: float              # median transfer rate
    ratio: float             # gbps / the median of the connections of its class


def connections(data: ReportData) -> list[Connection]:
    """Every connection with its median rate, the slowest relative to its like first: the
    connections of the same class (inside a host or between hosts, messages of the same
    power-of-two size), since NVLink and the network, or 4 KiB and 64 MiB messages, have
    rates no one should compare."""
    tr = data.transfers
    if tr is None or not len(tr.src):
        return []
    gbps = tr.nbytes * 8 / tr.seconds / 1e9
    n = int(max(tr.src.max(), tr.dst.max())) + 1
    key = tr.src.astype(np.int64) * n + tr.dst
    order = np.lexsort((gbps, key))
    keys, starts, counts = np.unique(key[order], return_index=True, return_counts=True)
    mid = starts + (counts - 1) // 2
    med = gbps[order][mid]
    size = tr.nbytes[order][mid]
    src, dst = keys // n, keys % n
    same_host = np.array([data.hosts.get(a, a) == data.hosts.get(b, b)
                          for a, b in zip(src.tolist(), dst.tolist(), strict=True)])
    cls = same_host * 64 + np.floor(np.log2(np.maximum(size, 1))).astype(np.int64)
    ratio = np.empty(len(med))
    for c in np.unique(cls):
        mine = cls == c
        ratio[mine] = med[mine] / (float(np.median(med[mine])) or 1.0)
    slow = np.argsort(ratio, kind="stable")
    return [Connection(int(src[i]), int(dst[i]), int(counts[i]), float(med[i]),
                       float(ratio[i])) for i in slow.tolist()]


def host_rail_transfers(data: ReportData, rows: Rows, hosts: list[str],
                        host_of: np.ndarray) -> tuple[str, str] | None:
    """Rails x hosts, colour = median rate of the transfers each host sends on each rail,
    relative to the median of all cells: one slow NIC or cable is one dark cell of a dense
    grid (a rank x rank matrix of thousands is empty but for its diagonals)."""
    tr = data.transfers
    if tr is None or not len(tr.src):
        return None
    nr, nh = len(rows.labels), len(hosts)
    inside = tr.src < len(host_of)
    src = tr.src[inside].astype(np.int64)
    gbps = (tr.nbytes * 8 / tr.seconds / 1e9)[inside]
    # a transfer inside one host (NVLink) is not on a rail
    across = host_of[src] != host_of[np.minimum(tr.dst[inside], len(host_of) - 1)]
    src, gbps = src[across], gbps[across]
    if not len(src):
        return None
    cell = rows.of_rank[src] * nh + host_of[src]
    order = np.lexsort((gbps, cell))
    cells, starts, counts = np.unique(cell[order], return_index=True, return_counts=True)
    med = gbps[order][starts + (counts - 1) // 2]
    typical = float(np.median(med)) or 1.0
    flat = np.full(nr * nh, np.nan)
    flat[cells] = med / typical
    grid = flat.reshape(nr, nh)
    plt = _plt()
    from matplotlib.colors import LogNorm, TwoSlopeNorm

    # at least 0.5 to 1.5: the few per cent by which healthy links differ stay pale
    low = min(float(np.nanmin(grid)), 0.5)
    high = max(float(np.nanmax(grid)), 1.5)
    fig, ax = plt.subplots(figsize=(11, 1.8 + 0.28 * nr))
    norm = TwoSlopeNorm(vcenter=1.0, vmin=low, vmax=high) if high < 4 else \
        LogNorm(vmin=low, vmax=high)
    img = ax.imshow(grid, aspect="auto", origin="lower",
                    cmap=plt.get_cmap("RdBu").with_extremes(bad=NO_DATA), norm=norm,
                    interpolation="nearest", extent=[0, nh, 0, nr])
    ax.set_yticks([i + 0.5 for i in range(nr)], rows.labels, fontsize=7)
    step = max(1, -(-nh // 16))
    ax.set_xticks([i + 0.5 for i in range(0, nh, step)], [hosts[i] for i in range(0, nh, step)],
                  rotation=45, ha="right", fontsize=7)
    ax.tick_params(axis="x", length=2)
    ax.set_xlabel("sending host")
    ax.set_ylabel(rows.axis)
    fig.colorbar(img, ax=ax, label="median rate / median of all cells", format="%.3g")
    worst = int(np.nanargmin(grid))
    r, h = divmod(worst, nh)
    caption = (f"{len(gbps):,} transfers between hosts, by the sending rank's host and rail "
               f"(median over all cells: {typical:.3g} Gbit/s; red is slower). Slowest: host "
               f"{hosts[h]}, {rows.labels[r]}, at {grid[r, h]:.2f} of the median.")
    return _svg(fig), caption


def _suspect_nodes(data: ReportData) -> tuple[set[str], set[tuple[str, str]]]:
    """Topology nodes and links named by the faults' suspects (ranks mapped to their GPU or
    host): every suspect of every report, so that none is left undrawn."""
    nodes: set[str] = set()
    links: set[tuple[str, str]] = set()
    for f in data.faults:
        for s in f.suspects:
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


#: a topology drawn whole up to this many nodes; beyond, the suspects' neighbourhood
FULL_TOPOLOGY_NODES = 160
#: names in one row of the drawing before they are turned upright, and before only some
#: of them are written
ROW_LABELS_FLAT, ROW_LABELS_ALL = 10, 48


def _layout(sub: Any) -> dict[str, tuple[float, float]]:
    """One row per tier (core, spine, leaf, NIC, host, GPU), each in natural order, spread
    over the width."""
    layer = {"core": 0, "spine": 1, "leaf": 2}
    rows: dict[int, list[str]] = {}
    for n, a in sub.nodes(data=True):
        kind = a.get("kind")
        lay = (layer.get(a.get("tier"), 2) if kind == "switch"
               else {"nic": 3, "host": 4, "gpu": 5}.get(kind, 5))
        rows.setdefault(lay, []).append(n)
    return {n: ((i + 0.5) / len(members), -float(lay))
            for lay, members in rows.items() for i, n in enumerate(members)}


def _labels(ax: Any, sub: Any, pos: dict[str, tuple[float, float]], bad: set[str]) -> None:
    """Name the nodes of each row without overlap: flat when few, upright when more, every
    k-th when still more; suspects always, in red."""
    by_row: dict[float, list[str]] = {}
    for n in sub:
        by_row.setdefault(pos[n][1], []).append(n)
    for members in by_row.values():
        step = max(1, -(-len(members) // ROW_LABELS_ALL))
        upright = len(members) > ROW_LABELS_FLAT
        for i, n in enumerate(members):
            suspect = n in bad
            if not suspect and i % step:
                continue
            ax.annotate(n, pos[n], xytext=(0, -7) if upright else (4, 6),
                        textcoords="offset points", rotation=90 if upright else 0,
                        ha="center" if upright else "left", va="top" if upright else "bottom",
                        fontsize=(8 if suspect else 6), color="#d7191c" if suspect else "#333333",
                        fontweight="bold" if suspect else "normal")


def topology_figure(data: ReportData) -> tuple[str, str] | None:
    """The topology with every suspect in red: whole when small, else the suspects'
    neighbourhood (their hosts, the switches their NICs attach to and those above)."""
    topo = data.topology
    if topo is None:
        return None
    import networkx as nx

    from c4.topology.model import natural_key
    from diagnosis.report_html.neighbourhood import neighbourhood

    g = topo.graph
    bad_nodes, bad_links = _suspect_nodes(data)
    whole = g.number_of_nodes() <= FULL_TOPOLOGY_NODES
    hidden = 0
    if whole:
        keep = set(g.nodes)
    else:
        seeds = bad_nodes | {n for link in bad_links for n in link}
        if not seeds & set(g.nodes):
            return None
        near = neighbourhood(topo, seeds)
        keep, hidden = near.nodes, near.hidden_hosts
    # a fresh graph, nodes in natural order (gpu2 before gpu10), so each row reads in order
    sub = nx.Graph()
    sub.add_nodes_from((n, dict(g.nodes[n])) for n in sorted(keep, key=natural_key))
    sub.add_edges_from(g.subgraph(keep).edges)
    pos = _layout(sub)
    colours = {"switch": "#4575b4", "nic": "#74add1", "host": "#999999", "gpu": "#abd9e9"}
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 6.5))
    edge_bad = [e for e in sub.edges if e in bad_links or e[::-1] in bad_links]
    nx.draw_networkx_edges(sub, pos, ax=ax, edge_color="#cccccc", width=0.6)
    if edge_bad:
        nx.draw_networkx_edges(sub, pos, edgelist=edge_bad, ax=ax, edge_color="#d7191c",
                               width=3)
    node_colour = ["#d7191c" if n in bad_nodes else colours.get(sub.nodes[n].get("kind"),
                                                                "#999999") for n in sub]
    size = [90 if n in bad_nodes else 25 for n in sub]
    nx.draw_networkx_nodes(sub, pos, ax=ax, node_color=node_colour, node_size=size)
    shown = bad_nodes | {n for e in edge_bad for n in e}
    _labels(ax, sub, pos, shown)
    ax.set_axis_off()
    ax.margins(x=0.03, y=0.12)
    named = sorted(bad_nodes) + [f"{a}~{b}" for a, b in sorted(bad_links)]
    undrawn = [n for n in bad_nodes if n not in g] + [
        f"{a}~{b}" for a, b in bad_links if not g.has_edge(a, b)]
    caption = (f"{g.number_of_nodes():,} nodes, {g.number_of_edges():,} links"
               + ("" if whole else
                  f"; drawn: the {sub.number_of_nodes():,} around the suspects (their hosts, "
                  "the switches their NICs attach to and those above"
                  + (f"; not drawn: the {hidden:,} other hosts on those switches" if hidden
                     else "") + ")")
               + f". Suspects in red ({len(named)}): " + (", ".join(named[:12]) if named
                                                          else "none")
               + (f" and {len(named) - 12} more" if len(named) > 12 else "") + "."
               + (f" Not in the topology: {', '.join(sorted(undrawn)[:6])}." if undrawn
                  else ""))
    return _svg(fig), caption


#: fault reports drawn on the timeline; the table above lists them all
TIMELINE_FAULTS = 40


def timeline_figure(data: ReportData) -> tuple[str, str] | None:
    rows: list[tuple[str, list[tuple[int, int]], str, list[tuple[int, str]]]] = []
    # the most certain first when there are too many to draw, then in time order
    shown = sorted(data.faults, key=lambda f: -(f.top.score if f.top else 0.0))
    shown = shown[:TIMELINE_FAULTS]
    for f in sorted(shown, key=lambda f: f.first_seen_ns):
        end = max(f.last_seen_ns, f.first_seen_ns)
        top = f"{f.top.type} {f.top.id}" if f.top else "?"    # "rank 1", not a bare "1"
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
    # on the heatmaps' clock (seconds since the first call, over the whole job), so that a
    # fault's bar lines up with the lateness it shades there
    calls = len(data.ops) > 0
    if calls:
        enter = data.ops["t_enter_ns"]
        t0, t1 = int(enter.min()), max(t1, int(enter.max()))
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
    ax.set_xlabel("seconds since the first call" if calls else "seconds since the first event")
    ax.set_xlim(0, max((t1 - t0) / 1e9, 1e-3))
    ax.grid(axis="x", color="#eeeeee")
    ax.set_axisbelow(True)   # the grid behind the bars, not across them
    caption = (f"{len(data.faults)} fault report(s) from first seen to last seen"
               + (f" ({len(shown)} most certain drawn)" if len(shown) < len(data.faults)
                  else "")
               + (f", {len(data.recoveries)} recovery(ies) with their phases" if data.recoveries
                  else "") + ".")
    return _svg(fig), caption
