"""The options that bound a Chrome trace file, shared by ``c4 analyze --chrome-trace`` (a
recorded trace) and ``c4 export --chrome-trace`` (a stored job)."""

from __future__ import annotations

import typer

SINCE = typer.Option(None, "--since", min=0.0, help="With --chrome-trace: only calls running "
                     "after this many seconds since the job's first call.")
UNTIL = typer.Option(None, "--until", min=0.0, help="With --chrome-trace: only calls entered "
                     "before this many seconds since the job's first call.")
MAX_CALLS = typer.Option(None, "--max-calls", min=1, help="With --chrome-trace: at most this "
                         "many calls (default a million, what a viewer in a browser tab "
                         "holds), those nearest the first fault's onset when there are more.")
