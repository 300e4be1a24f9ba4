"""Chaos benchmark of the sidecar: faults against real processes, exact counts (``run.py``)."""
