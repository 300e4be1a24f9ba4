"""How reports word times."""

from __future__ import annotations


def ms(ns: float) -> str:
    """A duration for a person: milliseconds, or whole seconds from 10 s up."""
    return f"{ns / 1e6:.1f} ms" if ns < 10e9 else f"{ns / 1e9:.0f} s"
