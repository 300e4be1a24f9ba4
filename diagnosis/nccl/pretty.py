"""Files of pretty-printed JSON records, one document after the other (documentation samples,
a ``jq .`` of a dump): each record with the line it starts on. A record cut short ends the
file: what follows cannot be told apart from the rest of the broken record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from diagnosis.nccl.problems import Problems


def json_documents(text: str, source: str, problems: Problems) -> Iterator[tuple[int, Any]]:
    """(line, document) for each JSON document of ``text`` in turn; a broken one is noted in
    ``problems`` (``bad_line``) and ends the reading."""
    dec, pos, end = json.JSONDecoder(), 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return
        line = text.count("\n", 0, pos) + 1
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError:
            problems.add(source, line, "bad_line", "a record cut short: the rest of the file "
                         "is skipped")
            return
        yield line, obj
