"""Slurm hostlist expressions: ``tux[0-3,12]``, ``g3-129-[235,237],g3-130-[001,003]``,
``switch.1.[1-2]``, ``rack[1-2]-node[01-16]`` (several brackets: every combination). Numbers keep
the zero padding of the range's first bound."""

from __future__ import annotations

import itertools
import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """A malformed hostlist expression; the message says what is wrong."""


def expand(expr: str) -> list[str]:
    """The names an expression stands for, in order; an empty expression gives none."""
    out: list[str] = []
    for item in _split_top(expr.strip()):
        if item:
            out.extend(_expand_item(item))
    return out


def _split_top(expr: str) -> list[str]:
    """Split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"']' without '[' in {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i].strip())
            start = i + 1
    if depth:
        raise HostlistError(f"'[' without ']' in {expr!r}")
    parts.append(expr[start:].strip())
    return parts


def _expand_item(item: str) -> list[str]:
    pieces = re.split(r"\[([^\]]*)\]", item)
    # pieces alternate: literal, bracket body, literal, ...
    choices: list[list[str]] = []
    for i, piece in enumerate(pieces):
        choices.append([piece] if i % 2 == 0 else _numbers(piece, item))
    return ["".join(combo) for combo in itertools.product(*choices)]


def _numbers(body: str, item: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise HostlistError(f"{part.strip()!r} in {item!r} is not a number or a range "
                                "like 01-16")
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(f"range {lo}-{hi} in {item!r} runs backwards")
        width = len(lo)
        out.extend(f"{n:0{width}d}" for n in range(a, b + 1))
    return out
