"""The store a benchmark's daemon writes to: a URL, and the ClickHouse server started for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def store_url(store: str, tmp: Path, database: str = "c4_bench") -> tuple[str, Any] | None:
    """(url, server or None) for ``memory``, ``sqlite`` or ``clickhouse``; None when the
    clickhouse-server binary is not installed. Stop the server when done."""
    if store == "memory":
        return "memory://", None
    if store == "sqlite":
        return f"sqlite:///{tmp / 'c4.db'}", None
    if store == "clickhouse":
        from tests.support.clickhouse import ClickHouseServer, find_binary

        command = find_binary()
        if command is None:
            return None
        (tmp / "ch").mkdir()
        server = ClickHouseServer(tmp / "ch", command)
        server.start()
        return server.url(database), server
    raise SystemExit(f"unknown store {store!r}: memory, sqlite or clickhouse")
