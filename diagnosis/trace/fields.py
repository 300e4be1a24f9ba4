"""One trace record's fields, checked one by one: the reader's slow path, which names the line
and field of a malformed record. It must reject at least what the fast path
(:mod:`diagnosis.trace.columns`) rejects, so that a failed batch always finds its culprit."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, NoReturn

from c4.errors import FormatError

_INT64 = (-(2**63), 2**63 - 1)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class Fields:
    """The fields of record ``rec`` (of type ``kind``) at ``line`` of ``source``: each getter
    returns the field's value, None for an absent optional one (missing or null), or raises a
    FormatError that says what the field must hold."""

    def __init__(self, rec: dict[str, Any], kind: str, source: str, line: int) -> None:
        self.rec, self.kind, self.source, self.line = rec, kind, source, line

    def fail(self, field: str, message: str) -> NoReturn:
        raise FormatError(f"{self.kind} record {message}", source=self.source, line=self.line,
                          field=field)

    def _missing(self, field: str, what: str) -> NoReturn:
        self.fail(field, f"needs {field!r}: {what}")

    def _wrong(self, field: str, what: str, value: Any) -> NoReturn:
        shown = repr(value)
        if len(shown) > 80:   # a huge or deeply nested value: its start is enough
            shown = f"{shown[:60]}... ({type(value).__name__}, {len(shown):,} characters)"
        self.fail(field, f"field {field!r} must be {what}, got {shown}")

    @staticmethod
    def _int_what(minimum: int | None) -> str:
        if minimum is None:
            return "an integer"
        return "a non-negative integer" if minimum == 0 else f"an integer of at least {minimum}"

    def integer(self, field: str, minimum: int | None = None) -> int:
        v = self.opt_integer(field, minimum)
        if v is None:
            self._missing(field, self._int_what(minimum))
        return v

    def opt_integer(self, field: str, minimum: int | None = None) -> int | None:
        v = self.rec.get(field)
        if v is None:
            return None
        what = self._int_what(minimum)
        if not _is_int(v) or (minimum is not None and v < minimum):
            self._wrong(field, what, v)
        if not _INT64[0] <= v <= _INT64[1]:
            self._wrong(field, f"{what} that fits in 64 bits", v)
        return v

    def string(self, field: str, what: str = "a string") -> str:
        v = self.opt_string(field, what)
        if v is None:
            self._missing(field, what)
        return v

    def opt_string(self, field: str, what: str = "a string") -> str | None:
        v = self.rec.get(field)
        if v is not None and not isinstance(v, str):
            self._wrong(field, what, v)
        return v

    def choice(self, field: str, options: Collection[str]) -> str:
        what = " or ".join(repr(o) for o in options)
        v = self.rec.get(field)
        if v is None:
            self._missing(field, what)
        if not isinstance(v, str) or v not in options:
            self._wrong(field, what, v)
        return v

    def opt_path(self, field: str) -> list[str] | None:
        v = self.rec.get(field)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            self._wrong(field, "a list of topology node ids (strings), from the source NIC "
                        "to the destination NIC", v)
        return v

    def int_list(self, field: str, what: str) -> list[int]:
        v = self.rec.get(field)
        if v is None:
            self._missing(field, what)
        if not isinstance(v, list) or not all(_is_int(x) for x in v):
            self._wrong(field, what, v)
        return v
