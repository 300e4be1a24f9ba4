"""Backends by name, imported only when asked for (as torchelastic's rendezvous handler registry
does): a contract's module knows no backend; the built-in ones register a factory that imports
their module on first use, and another package adds its own either by calling ``register`` or
through an entry point in the registry's group (``[project.entry-points."c4.stores"]``,
``sqlite = "mypkg.store:open_store"``), loaded the first time its name is asked for."""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Registry(Generic[T]):
    """Factories by name. ``what`` names the kind of backend in messages ("store"); ``error``
    is the exception the owning package raises; ``group`` the entry-point group searched for a
    name nobody registered."""

    def __init__(self, what: str, error: type[Exception], group: str) -> None:
        self._what = what
        self._error = error
        self._group = group
        self._factories: dict[str, tuple[Callable[[str], T], str]] = {}

    def register(self, name: str, factory: Callable[[str], T], *, usage: str = "") -> None:
        """Build ``name`` backends with ``factory`` (given the rest of the spec or URL);
        ``usage`` shows the form in errors. Another factory for a taken name is refused."""
        if not name or ":" in name:
            raise self._error(f"{self._what} name {name!r} must be non-empty, without ':'")
        known = self._factories.get(name)
        if known is not None and known[0] is not factory:
            raise self._error(f"{self._what} {name!r} is already registered to "
                              f"{known[0].__module__}.{known[0].__qualname__}")
        self._factories[name] = (factory, usage or (known[1] if known else name))

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

    def usages(self) -> str:
        return ", ".join(sorted({usage for _, usage in self._factories.values()}))

    def factory(self, name: str) -> Callable[[str], T] | None:
        """The factory registered for ``name``, or one an installed package declares in the
        entry-point group (registered on first use); None when there is none."""
        if name not in self._factories:
            for ep in entry_points(group=self._group, name=name):
                try:
                    self.register(name, ep.load(), usage=f"{name}:...")
                except Exception as exc:   # a broken plugin must not hide the built-in names
                    raise self._error(f"the {self._what} backend {name!r} of entry point "
                                      f"{ep.value} cannot be loaded: {exc}") from exc
                log.info("%s backend %r from entry point %s", self._what, name, ep.value)
                break
        found = self._factories.get(name)
        return found[0] if found is not None else None
