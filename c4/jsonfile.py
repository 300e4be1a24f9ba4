"""Read a whole JSON file (a topology, a flows or plan file, a fault report document) with an
error that names the file, the line and what the file should be, for every way it can be bad:
unreadable, not UTF-8, not JSON, nested deeper than the parser goes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from c4.errors import FormatError

#: builds the error: ``error(message, source=path, line=line)`` (FormatError and the parts'
#: own format errors take that form)
ErrorType = Callable[..., Exception]


def read_json(path: str | Path, what: str, error: ErrorType = FormatError) -> Any:
    """The document in ``path``; ``what`` says what it should be ("topology file", "flows
    file"), for the messages."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise error(f"cannot read {what}: {exc}", source=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text ({exc.reason} at byte {exc.start}): a {what} is a JSON "
                    "file", source=str(path)) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON: {exc.msg}", source=str(path), line=exc.lineno) from exc
    except RecursionError:
        raise error(f"JSON nested too deeply to read (a {what} nests a few levels); is this a "
                    f"{what}?", source=str(path), line=deep_line(text)) from None


def deep_line(text: str, limit: int = 256) -> int | None:
    """The line where brackets first nest ``limit`` deep (outside strings), for the error."""
    depth, line, in_str, escaped = 0, 1, False, False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth >= limit:
                return line
        elif ch in "]}":
            depth -= 1
        if ch == "\n":
            line += 1
    return None
