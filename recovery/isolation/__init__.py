"""Isolation backends behind one contract (``api.Isolator``): a local blocklist file (the
default), Slurm, Kubernetes, registered by name in ``registry``; ``open_isolator(spec)`` builds
one from a ``--isolator`` value."""

from recovery.isolation.api import Isolator
from recovery.isolation.registry import isolator_registry, open_isolator

__all__ = ["Isolator", "isolator_registry", "open_isolator"]
