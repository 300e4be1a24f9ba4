"""Assemble the report: one HTML file with inline SVG figures and no script or remote resource,
so it opens anywhere (an air-gapped laptop, a ticket attachment) and renders the same."""

from __future__ import annotations

import datetime as dt
import html
import logging

import numpy as np

from c4.report import suspect_ranks
from diagnosis.engine.wording import call_words
from diagnosis.report_html import plots
from diagnosis.report_html.data import ReportData
from diagnosis.report_html.placement import placement

log = logging.getLogger(__name__)

#: jobs up to this many ranks get the per-rank views; larger ones per host and per rail
DETAILED_RANKS = 64
#: rows of the latest-ranks and slowest-connections tables
TOP_ROWS = 15

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1200px; color: #222; background: #fff; }
h3 { font-size: 14px; margin-top: 18px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 32px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta, .caption, .note { color: #555; font-size: 13px; }
.note { background: #fff8e1; border-left: 3px solid #f0b400; padding: 6px 10px; }
.figure svg { max-width: 100%; height: auto; }
.figure.wide svg { width: 100%; }
table { border-collapse: collapse; font-size: 13px; width: 100%; }
th, td { border-bottom: 1px solid #eee; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
.empty { color: #888; font-style: italic; }
"""


def _when(ns: int) -> str:
    if not ns:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S.%f")[:-3]


def _section(title: str, fig: tuple[str, str] | None, empty: str, wide: bool = True) -> str:
    out = f"<h2>{html.escape(title)}</h2>\n"
    if fig is None:
        return out + f'<p class="empty">{html.escape(empty)}</p>\n'
    svg, caption = fig
    kind = "figure wide" if wide else "figure"
    return out + (f'<div class="{kind}">{svg}</div>\n'
                  f'<p class="caption">{html.escape(caption)}</p>\n')


def _fault_table(data: ReportData) -> str:
    if not data.faults:
        return '<p class="empty">No fault reports for this job.</p>\n'
    rows = []
    for f in sorted(data.faults, key=lambda f: f.first_seen_ns):
        suspects = ", ".join(f"{s.type} {s.id} ({s.score:.2f})" for s in f.suspects[:3]) or "-"
        where = call_words(f.pg, f.seq)
        summary = html.escape(f.summary) + "".join(
            f"<br><b>cause</b> {html.escape(c['target'])}: {html.escape(c['summary'])} "
            f"<i>({html.escape(c['action'])})</i>" for c in f.causes)
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            f.kind, f.state, _when(f.first_seen_ns), suspects, where)) +
            f"<td>{summary}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("kind", "state", "first seen (UTC)", "suspects",
                                              "where", "summary"))
    return f"<table><tr>{head}</tr>\n" + "\n".join(rows) + "</table>\n"


def _where(data: ReportData, rank: int) -> str:
    return data.gpus.get(rank) or data.hosts.get(rank) or ""


def _table(head: tuple[str, ...], rows: list[tuple]) -> str:
    cells = "".join(f"<th>{h}</th>" for h in head)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row)
                     + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>\n{body}</table>\n"


def _latest_table(data: ReportData, late: plots.Lateness | None) -> str:
    if late is None or not len(late[0]):
        return ""
    rows = [(r, _where(data, r), f"{ms:+.3f}", f"{n:,}") for r, ms, n in
            plots.latest_ranks(late, TOP_ROWS)]
    return (f"<h3>The {len(rows)} latest ranks</h3>\n"
            + _table(("rank", "where", "mean skew (ms)", "calls"), rows))


def _connections_table(data: ReportData) -> str:
    conns = plots.connections(data)
    if not conns:
        return ""
    rows = [(f"{c.src} -> {c.dst}", _where(data, c.src), _where(data, c.dst), f"{c.gbps:.3g}",
             f"{c.ratio:.2f}", f"{c.transfers:,}") for c in conns[:TOP_ROWS]]
    return (f"<h3>The {len(rows)} slowest of {len(conns):,} connections</h3>\n"
            + _table(("connection", "from", "to", "median Gbit/s", "of its class's median",
                      "transfers"), rows)
            + '<p class="caption">A class: the connections inside a host or between hosts '
            'whose messages have the same power-of-two size.</p>\n')


def _topology_empty(data: ReportData) -> str:
    if data.topology is None:
        return "No topology given (pass --topology FILE)."
    return (f"No suspect to draw around: a topology of "
            f"{data.topology.graph.number_of_nodes():,} nodes is drawn whole only up to "
            f"{plots.FULL_TOPOLOGY_NODES}, beyond that the suspects' neighbourhood.")


def render(data: ReportData) -> str:
    """The whole page for ``data``: detailed views for a small job, per-host and per-rail
    summaries and the top rows for a large one (more than ``DETAILED_RANKS`` ranks)."""
    ranks = len(set(data.ops["rank"].tolist())) if len(data.ops) else len(data.hosts)
    # the world size as far as known: the largest rank that called or was placed
    nranks = max(int(data.ops["rank"].max()) + 1 if len(data.ops) else 0,
                 max(data.hosts, default=-1) + 1)
    large = nranks > DETAILED_RANKS
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>c4 report: {html.escape(data.job)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>c4 report: job {html.escape(data.job)}</h1>",
        f'<p class="meta">From {html.escape(data.origin)}; {len(data.ops):,} calls of '
        f"{ranks:,} ranks; {len(data.faults)} fault report(s); generated "
        f"{_when(int(dt.datetime.now(dt.timezone.utc).timestamp() * 1e9))} UTC.</p>",
    ]
    if large:
        parts.append(f'<p class="note">A job of {nranks:,} ranks: ranks are summarised per '
                     "host and per rail, with the latest ranks and slowest connections "
                     "listed, and the topology drawn around the suspects.</p>")
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in data.notes]
    parts.append("<h2>Fault reports</h2>\n" + _fault_table(data))
    log.info("drawing the timeline of %d fault report(s)", len(data.faults))
    parts.append(_section("Timeline of faults and recoveries", plots.timeline_figure(data),
                          "No faults or recoveries to show."))
    log.info("computing the arrival skew of %s calls", f"{len(data.ops):,}")
    late = plots.lateness(data.ops)
    no_calls = "No collective calls seen by more than one rank."
    if large and late is not None:
        place = placement(nranks, data.hosts, data.gpus, data.nics, data.topology)
        suspects = {data.hosts.get(r, "") for f in data.faults for r in suspect_ranks(f)} \
            | {s.id for f in data.faults for s in f.suspects if s.type == "host"}
        by_host = plots.Rows(place.host_of, place.hosts, "host (natural order)", latest=True,
                             marked=frozenset(suspects))
        by_rail = plots.Rows(np.maximum(place.rail_of, 0),
                             [f"rail {r}" for r in range(max(place.rails, 1))],
                             "rail (" + place.rail_source + ")")
        log.info("drawing lateness per host (%d) and per rail (%d)", len(place.hosts),
                 place.rails)
        parts.append(_section("Lateness over time, per host",
                              plots.lateness_heatmap(data.ops, data.faults, by_host, late),
                              no_calls))
        parts.append(_section("Lateness over time, per rail",
                              plots.lateness_heatmap(data.ops, data.faults, by_rail, late),
                              no_calls))
        parts.append(_latest_table(data, late))
        log.info("drawing transfer rates per host and rail")
        parts.append(_section("Transfer rate per host and rail",
                              plots.host_rail_transfers(data, by_rail, place.hosts,
                                                        place.host_of),
                              "No finished transfers between hosts."))
    else:
        log.info("drawing lateness per rank")
        parts.append(_section("Per-rank lateness over time",
                              plots.lateness_heatmap(data.ops, data.faults, late=late),
                              no_calls))
        parts.append(_latest_table(data, late))
        log.info("drawing the connection matrix")
        parts.append(_section("Transfer rate per connection (source x destination)",
                              plots.transfer_matrix(data),
                              "No finished point-to-point transfers or connection samples.",
                              wide=False))
    parts.append(_connections_table(data))
    log.info("drawing the topology")
    parts.append(_section("Topology and suspects", plots.topology_figure(data),
                          _topology_empty(data)))
    parts.append("</body></html>\n")
    return "\n".join(parts)
