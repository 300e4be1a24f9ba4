"""How reports word times and process groups."""

from __future__ import annotations


def ms(ns: float) -> str:
    """A duration for a person: milliseconds, or whole seconds from 10 s up."""
    return f"{ns / 1e6:.1f} ms" if ns < 10e9 else f"{ns / 1e9:.0f} s"


def group_words(name: str, noun: str = "") -> str:
    """A process group as a sentence names it: torch calls its groups "0", "1", ... and
    "peers completed 0 #125" reads as a count, not a group. ``noun`` goes before other names."""
    if name.isdigit():
        return f"process group {name}"
    return f"{noun} {name}" if noun else name


def call_words(pg: str | None, seq: int | None) -> str:
    """Where in the job a report points, as far as it knows: its process group and call
    ("process group 0 call #332"), or "" when it names no group."""
    if not pg:
        return ""
    return group_words(pg, "process group") + ("" if seq is None else f" call #{seq}")
