"""Something to run: what the engineer on call can look at in a hung rank's process (its PID
and host, its Python stack, a Flight Recorder dump of its process groups)."""

from diagnosis.inspection.process import ProcessFacts, inspect_process

__all__ = ["ProcessFacts", "inspect_process"]
