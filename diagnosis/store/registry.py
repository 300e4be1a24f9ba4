"""Which backend opens a store URL: factories by URL scheme (``c4.registry.Registry``).

A backend's module is imported only when a URL of its scheme is opened, so the contract
(``diagnosis.store.api``) knows no backend and a deployment without ``clickhouse-driver`` never
imports it. The built-in schemes are registered below; another backend registers its own with
``store_registry.register(scheme, opener)`` or an entry point in the ``c4.stores`` group."""

from __future__ import annotations

from c4.registry import Registry
from diagnosis.errors import StoreError
from diagnosis.store.api import Store


def _sqlite(url: str) -> Store:
    from diagnosis.store.sqlite import SQLiteStore

    return SQLiteStore.from_url(url)


def _memory(url: str) -> Store:
    from diagnosis.store.memory import MemoryStore

    return MemoryStore.from_url(url)


def _clickhouse(url: str) -> Store:
    from diagnosis.store.clickhouse import ClickHouseStore

    return ClickHouseStore.from_url(url)


#: openers by URL scheme (the part before the first ``:``), each given the whole URL
store_registry: Registry[Store] = Registry("store", StoreError, "c4.stores")
store_registry.register("sqlite", _sqlite, usage="sqlite:///PATH")
store_registry.register("clickhouse", _clickhouse,
                        usage="clickhouse://USER:PASSWORD@HOST:PORT/DB")
store_registry.register("memory", _memory, usage="memory:// (nothing persists)")


def open_store(url: str) -> Store:
    """Open a store from a URL: ``sqlite:///path/to/c4.db``, ``sqlite://:memory:``,
    ``clickhouse://user:password@host:port/database``, ``memory://`` (nothing persists), or
    the scheme of a registered backend."""
    scheme, sep, _ = url.partition(":")
    opener = store_registry.factory(scheme) if sep and scheme else None
    if opener is None:
        raise StoreError(f"unknown store URL {url!r}: use one of {store_registry.usages()}")
    return opener(url)
