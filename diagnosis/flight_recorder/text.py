"""Small phrases shared by the report summaries."""

from __future__ import annotations

from collections.abc import Iterable


def ranks(rs: Iterable[int]) -> str:
    """``rank 3`` or ``ranks 0, 1, 5``."""
    out = sorted(set(rs))
    return ("rank " if len(out) == 1 else "ranks ") + ", ".join(str(r) for r in out)


def verb(rs: Iterable[int], one: str, many: str) -> str:
    return one if len(set(rs)) == 1 else many
