"""Run a training script as one rank of a lab job: ``torchrun ... -m c4.lab.launch SCRIPT ARGS``.

torchrun gives every worker of a node the same environment; this sets the rank's topology GPU
id (``C4_GPU`` = host id + ``/gpu`` + local rank) before the script and its collectors start."""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m c4.lab.launch SCRIPT [ARGS...]")
    host, local = os.environ.get("C4_HOST"), os.environ.get("LOCAL_RANK")
    if host and local is not None and not os.environ.get("C4_GPU"):
        os.environ["C4_GPU"] = f"{host}/gpu{local}"
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
