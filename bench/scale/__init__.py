"""Telemetry at scale (issue 15): what the reduced mode costs a node (``edge``) and what one
daemon sustains from a whole large job's reduced stream (``job``)."""
