"""Assemble the report: one HTML file with inline SVG figures and no script or remote resource,
so it opens anywhere (an air-gapped laptop, a ticket attachment) and renders the same."""

from __future__ import annotations

import datetime as dt
import html

from diagnosis.report_html import plots
from diagnosis.report_html.data import ReportData

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1200px; color: #222; background: #fff; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 32px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta, .caption, .note { color: #555; font-size: 13px; }
.note { background: #fff8e1; border-left: 3px solid #f0b400; padding: 6px 10px; }
.figure svg { max-width: 100%; height: auto; }
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


def _section(title: str, fig: tuple[str, str] | None, empty: str) -> str:
    out = f"<h2>{html.escape(title)}</h2>\n"
    if fig is None:
        return out + f'<p class="empty">{html.escape(empty)}</p>\n'
    svg, caption = fig
    return out + f'<div class="figure">{svg}</div>\n<p class="caption">{html.escape(caption)}</p>\n'


def _fault_table(data: ReportData) -> str:
    if not data.faults:
        return '<p class="empty">No fault reports for this job.</p>\n'
    rows = []
    for f in sorted(data.faults, key=lambda f: f.first_seen_ns):
        suspects = ", ".join(f"{s.type} {s.id} ({s.score:.2f})" for s in f.suspects[:3]) or "-"
        where = f"{f.pg} #{f.seq}" if f.pg and f.seq is not None else (f.pg or "")
        summary = html.escape(f.summary) + "".join(
            f"<br><b>cause</b> {html.escape(c['target'])}: {html.escape(c['summary'])} "
            f"<i>({html.escape(c['action'])})</i>" for c in f.causes)
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            f.kind, f.state, _when(f.first_seen_ns), suspects, where)) +
            f"<td>{summary}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("kind", "state", "first seen (UTC)", "suspects",
                                              "where", "summary"))
    return f"<table><tr>{head}</tr>\n" + "\n".join(rows) + "</table>\n"


def render(data: ReportData) -> str:
    """The whole page for ``data``."""
    ranks = len(set(data.ops["rank"].tolist())) if len(data.ops) else len(data.hosts)
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>c4 report: {html.escape(data.job)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>c4 report: job {html.escape(data.job)}</h1>",
        f'<p class="meta">From {html.escape(data.origin)}; {len(data.ops):,} calls of '
        f"{ranks:,} ranks; {len(data.faults)} fault report(s); generated "
        f"{_when(dt.datetime.now(dt.timezone.utc).timestamp() * 1e9)} UTC.</p>",
    ]
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in data.notes]
    parts.append("<h2>Fault reports</h2>\n" + _fault_table(data))
    parts.append(_section("Timeline of faults and recoveries", plots.timeline_figure(data),
                          "No faults or recoveries to show."))
    parts.append(_section("Per-rank lateness over time",
                          plots.lateness_heatmap(data.ops, data.faults),
                          "No collective calls seen by more than one rank."))
    parts.append(_section("Transfer rate per connection (source x destination)",
                          plots.transfer_matrix(data),
                          "No finished point-to-point transfers or connection samples."))
    parts.append(_section("Topology and suspects", plots.topology_figure(data),
                          "No topology given (pass --topology FILE)."))
    parts.append("</body></html>\n")
    return "\n".join(parts)
