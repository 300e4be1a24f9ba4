"""Store URLs are opened by the backend registered for their scheme, and a backend's module is
imported only when a URL of its scheme is opened."""

from __future__ import annotations

import subprocess
import sys

import pytest

from diagnosis.errors import StoreError
from diagnosis.store import open_store, store_registry
from diagnosis.store.memory import MemoryStore


def test_builtin_schemes_are_registered():
    assert {"sqlite", "clickhouse", "memory"} <= set(store_registry.names())


def test_an_unknown_scheme_names_the_known_forms():
    with pytest.raises(StoreError) as err:
        open_store("postgres://db/c4")
    text = str(err.value)
    assert "postgres://db/c4" in text
    for form in ("sqlite:///PATH", "clickhouse://", "memory://"):
        assert form in text
    with pytest.raises(StoreError, match="unknown store URL"):
        open_store("no-scheme-at-all")


def test_a_registered_backend_opens_its_urls():
    opened: list[str] = []

    def opener(url: str) -> MemoryStore:
        opened.append(url)
        return MemoryStore()

    store_registry.register("scratch-test", opener, usage="scratch-test://NAME")
    store = open_store("scratch-test://a")
    assert isinstance(store, MemoryStore) and opened == ["scratch-test://a"]
    with pytest.raises(StoreError, match="already registered"):
        store_registry.register("scratch-test", lambda url: MemoryStore())
    with pytest.raises(StoreError) as err:
        open_store("nope://")
    assert "scratch-test://NAME" in str(err.value)


def test_backends_are_imported_only_when_opened():
    code = ("import sys\n"
            "from diagnosis.store import open_store\n"
            "assert 'diagnosis.store.clickhouse' not in sys.modules, 'clickhouse at import'\n"
            "assert 'diagnosis.store.sqlite' not in sys.modules, 'sqlite at import'\n"
            "open_store('sqlite://:memory:').close()\n"
            "assert 'diagnosis.store.sqlite' in sys.modules\n"
            "assert 'diagnosis.store.clickhouse' not in sys.modules, 'clickhouse with sqlite'\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
