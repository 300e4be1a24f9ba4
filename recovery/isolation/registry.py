"""Which backend a ``--isolator`` value names: factories by name (``c4.registry.Registry``).

A backend's module is imported only when it is asked for, so the contract
(``recovery.isolation.api``) knows no backend and a host without the Kubernetes client never
imports it. The built-in backends are registered below; another registers itself with
``isolator_registry.register(name, factory)`` or an entry point in the ``c4.isolators`` group.
"""

from __future__ import annotations

from c4.registry import Registry
from recovery.errors import IsolationError
from recovery.isolation.api import Isolator


def _blocklist(arg: str) -> Isolator:
    from recovery.isolation.blocklist import BlocklistIsolator

    return BlocklistIsolator(arg or None)


def _slurm(arg: str) -> Isolator:
    from recovery.isolation.slurm import SlurmIsolator

    if arg:
        raise IsolationError(f"the slurm isolator takes no argument, got slurm:{arg}")
    return SlurmIsolator()


def _kubernetes(arg: str) -> Isolator:
    from recovery.isolation.kubernetes import KubernetesIsolator

    return KubernetesIsolator.from_kubeconfig(namespace=arg or "default")


#: factories by name, each given the part of the spec after ``NAME:`` ("" when none)
isolator_registry: Registry[Isolator] = Registry("isolator", IsolationError, "c4.isolators")
isolator_registry.register("blocklist", _blocklist, usage="blocklist[:PATH]")
isolator_registry.register("slurm", _slurm, usage="slurm")
isolator_registry.register("kubernetes", _kubernetes, usage="kubernetes[:NAMESPACE]")
isolator_registry.register("k8s", _kubernetes, usage="kubernetes[:NAMESPACE]")


def open_isolator(spec: str) -> Isolator:
    """``blocklist[:PATH]``, ``slurm``, ``kubernetes[:NAMESPACE]`` (or ``k8s``), or a
    registered backend's name."""
    name, _, arg = spec.partition(":")
    factory = isolator_registry.factory(name)
    if factory is None:
        raise IsolationError(f"unknown isolator {spec!r}: use one of "
                             f"{isolator_registry.usages()}")
    return factory(arg)
