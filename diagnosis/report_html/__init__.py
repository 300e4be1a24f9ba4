"""``c4 report --html``: one self-contained page of plots about a job (no scripts, no fetches)."""

from __future__ import annotations

from diagnosis.report_html.data import ReportData, from_daemon, from_trace
from diagnosis.report_html.page import render

__all__ = ["ReportData", "from_daemon", "from_trace", "render"]
