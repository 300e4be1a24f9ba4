"""Which backend a ``--isolator`` value names: a registry of factories by backend name.

A backend's module is imported only when it is asked for, so the contract
(``recovery.isolation.api``) knows no backend and a host without the Kubernetes client never
imports it. The built-in backends are registered below; another registers itself with
``isolator_registry.register(name, factory)``."""

from __future__ import annotations

from collections.abc import Callable

from recovery.errors import IsolationError
from recovery.isolation.api import Isolator

#: Builds an isolator from the part of the spec after ``NAME:`` ("" when none was given).
Factory = Callable[[str], Isolator]


class IsolatorRegistry:
    """Factories by backend name; a spec is ``NAME`` or ``NAME:ARGUMENT``."""

    def __init__(self) -> None:
        self._factories: dict[str, tuple[Factory, str]] = {}

    def register(self, name: str, factory: Factory, *, usage: str = "") -> None:
        """Build ``name`` isolators with ``factory``; ``usage`` shows the spec form in errors.
        Registering another factory for a taken name is refused."""
        if not name or ":" in name:
            raise IsolationError(f"isolator name {name!r} must be non-empty, without ':'")
        known = self._factories.get(name)
        if known is not None and known[0] is not factory:
            raise IsolationError(f"isolator {name!r} is already registered to "
                                 f"{known[0].__module__}.{known[0].__qualname__}")
        self._factories[name] = (factory, usage or name)

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

    def open(self, spec: str) -> Isolator:
        name, _, arg = spec.partition(":")
        found = self._factories.get(name)
        if found is None:
            usages = sorted({usage for _, usage in self._factories.values()})
            raise IsolationError(f"unknown isolator {spec!r}: use one of {', '.join(usages)}")
        return found[0](arg)


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


isolator_registry = IsolatorRegistry()
isolator_registry.register("blocklist", _blocklist, usage="blocklist[:PATH]")
isolator_registry.register("slurm", _slurm, usage="slurm")
isolator_registry.register("kubernetes", _kubernetes, usage="kubernetes[:NAMESPACE]")
isolator_registry.register("k8s", _kubernetes, usage="kubernetes[:NAMESPACE]")


def open_isolator(spec: str) -> Isolator:
    """``blocklist[:PATH]``, ``slurm``, ``kubernetes[:NAMESPACE]`` (or ``k8s``), or a
    registered backend's name."""
    return isolator_registry.open(spec)
