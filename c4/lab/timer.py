"""``inject --for SECONDS``: a detached process that clears one fault when its time is up."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    lab_dir, fid, seconds = Path(argv[0]), int(argv[1]), float(argv[2])
    time.sleep(seconds)
    from c4.lab.faults import clear

    try:
        clear(lab_dir, fid, from_timer=True)
    except Exception as exc:  # the lab may be gone already
        print(f"timer of fault {fid}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
