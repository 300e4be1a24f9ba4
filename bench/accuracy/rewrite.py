"""Rewrite a simulated trace as a sparser exporter would: without some of the format's optional
fields (shared specs section 2), so that the bench measures what c4 makes of such traces."""

from __future__ import annotations

import json
from pathlib import Path

#: what each name leaves out: (record type, fields); no fields drops the record itself
DROPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "peer": ("op", ("peer",)),                  # send/recv rows without the other rank
    "t_start_ns": ("op", ("t_start_ns",)),      # calls with entry and end times only
    "placement": ("rank", ("gpu", "nic")),      # ranks placed by host only
    "conn_call": ("conn", ("pg", "seq")),       # transfers not tied to their call
    "end": ("end", ()),                         # no record of when recording stopped
}


def parse_drops(text: str) -> tuple[str, ...]:
    names = tuple(x for x in text.split(",") if x)
    unknown = [x for x in names if x not in DROPS]
    if unknown:
        raise ValueError(f"unknown --drop {', '.join(unknown)}: choose from {', '.join(DROPS)}")
    return names


def rewrite(src: Path, dst: Path, drops: tuple[str, ...]) -> None:
    """Copy ``src`` to ``dst`` line by line without the fields named by ``drops``."""
    by_type: dict[str, list[str]] = {}
    gone: set[str] = set()
    for name in drops:
        kind, fields = DROPS[name]
        if fields:
            by_type.setdefault(kind, []).extend(fields)
        else:
            gone.add(kind)
    with open(src, "rb") as fin, open(dst, "w") as fout:
        for line in fin:
            rec = json.loads(line)
            kind = rec.get("type")
            if kind in gone:
                continue
            for f in by_type.get(kind, ()):
                rec.pop(f, None)
            fout.write(json.dumps(rec, separators=(",", ":")) + "\n")

