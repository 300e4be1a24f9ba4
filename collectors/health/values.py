"""Reading the values that health tools print: numbers with units as text, and the sentinels
(``N/A``, ``[Not Supported]``, DCGM's blank values) that mean "no value", never zero."""

from __future__ import annotations

import re

#: what the tools print instead of a value: a missing value, not a zero
_SENTINELS = frozenset({
    "n/a", "not supported", "requested functionality has been deprecated", "unknown error",
    "insufficient permissions", "-", "", "none", "not available",
})
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: DCGM blank values (dcgm_structs.h): int64 0x7ffffffffffffff0 and up, int32 0x7ffffff0 and up;
#: +1 not found, +2 not supported, +3 not permissioned. Missing, not values.
_DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
_DCGM_INT32_BLANK = 0x7FFFFFF0
_TRUE = frozenset({"yes", "active", "enabled", "true"})
_FALSE = frozenset({"no", "not active", "disabled", "false"})


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (``nvidia-smi topo -m`` underlines its header)."""
    return _ANSI.sub("", text)


def is_missing(text: str) -> bool:
    """True for the sentinels a tool prints instead of a value (bracketed in CSV output)."""
    t = text.strip().strip("[]").strip().lower()
    return t in _SENTINELS


def number(text: str) -> float | None:
    """The leading number of ``"71.53 W"``, ``"16x"``, ``"2560 bank(s)"``, ``"0x1FF"``; None for
    a sentinel or DCGM blank. Raises ValueError for text that is neither."""
    t = text.strip()
    if is_missing(t):
        return None
    if t.lower().startswith("0x"):
        v: float = int(t.split()[0], 16)
    else:
        m = _NUMBER.match(t)
        if m is None:
            raise ValueError(f"{text!r} is not a number")
        v = float(m.group(0))
    if v >= _DCGM_INT64_BLANK or _DCGM_INT32_BLANK <= v < _DCGM_INT32_BLANK + 16:
        return None
    return v


def flag(text: str) -> float | None:
    """``Yes``/``Active``/``Enabled`` → 1.0, ``No``/``Not Active``/``Disabled`` → 0.0; a
    sentinel → None. Raises ValueError for anything else."""
    t = text.strip().strip("[]").strip().lower()
    if t in _TRUE:
        return 1.0
    if t in _FALSE:
        return 0.0
    if is_missing(t):
        return None
    raise ValueError(f"{text!r} is not Yes/No or Active/Not Active")
