"""Isolation backends behind one contract (``api.Isolator``): a local blocklist file (the
default), Slurm, Kubernetes. ``open_isolator(spec)`` builds one from a ``--isolator`` value."""

from recovery.isolation.api import Isolator, open_isolator

__all__ = ["Isolator", "open_isolator"]
