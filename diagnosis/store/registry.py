"""Which backend opens a store URL: a registry of openers by URL scheme.

A backend's module is imported only when a URL of its scheme is opened, so the contract
(``diagnosis.store.api``) knows no backend and a deployment without ``clickhouse-driver`` never
imports it. The built-in schemes are registered below; another backend registers its own with
``store_registry.register(scheme, opener)``."""

from __future__ import annotations

from collections.abc import Callable

from diagnosis.errors import StoreError
from diagnosis.store.api import Store

#: Opens a store from its whole URL.
Opener = Callable[[str], Store]


class StoreRegistry:
    """Openers by URL scheme (the part before the first ``:``)."""

    def __init__(self) -> None:
        self._openers: dict[str, tuple[Opener, str]] = {}

    def register(self, scheme: str, opener: Opener, *, example: str = "") -> None:
        """Open URLs of ``scheme`` with ``opener``; ``example`` shows the URL form in errors.
        Registering another opener for a taken scheme is refused."""
        if not scheme or ":" in scheme:
            raise StoreError(f"store scheme {scheme!r} must be a non-empty name without ':'")
        known = self._openers.get(scheme)
        if known is not None and known[0] is not opener:
            raise StoreError(f"store scheme {scheme!r} is already registered to "
                             f"{known[0].__module__}.{known[0].__qualname__}")
        self._openers[scheme] = (opener, example or f"{scheme}://...")

    def schemes(self) -> tuple[str, ...]:
        return tuple(sorted(self._openers))

    def open(self, url: str) -> Store:
        scheme, sep, _ = url.partition(":")
        found = self._openers.get(scheme) if sep else None
        if found is None:
            forms = ", ".join(example for _, example in
                              (self._openers[s] for s in self.schemes()))
            raise StoreError(f"unknown store URL {url!r}: use one of {forms}")
        return found[0](url)


def _sqlite(url: str) -> Store:
    from diagnosis.store.sqlite import SQLiteStore

    return SQLiteStore.from_url(url)


def _memory(url: str) -> Store:
    from diagnosis.store.memory import MemoryStore

    return MemoryStore.from_url(url)


def _clickhouse(url: str) -> Store:
    from diagnosis.store.clickhouse import ClickHouseStore

    return ClickHouseStore.from_url(url)


store_registry = StoreRegistry()
store_registry.register("sqlite", _sqlite, example="sqlite:///PATH")
store_registry.register("clickhouse", _clickhouse,
                        example="clickhouse://USER:PASSWORD@HOST:PORT/DB")
store_registry.register("memory", _memory, example="memory:// (nothing persists)")


def open_store(url: str) -> Store:
    """Open a store from a URL: ``sqlite:///path/to/c4.db``, ``sqlite://:memory:``,
    ``clickhouse://user:password@host:port/database``, ``memory://`` (nothing persists), or
    the scheme of a registered backend."""
    return store_registry.open(url)
