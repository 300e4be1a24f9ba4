"""Regenerate the checked-in protobuf and gRPC code: ``python -m proto.generate``.

The include path is rooted at the repository, so generated modules import each other as
``proto.c4_pb2`` with no ``sys.path`` changes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ["proto/c4.proto"]
GENERATED = ["proto/c4_pb2.py", "proto/c4_pb2.pyi", "proto/c4_pb2_grpc.py"]


def generate(out_dir: Path) -> None:
    """Write the generated modules under ``out_dir`` (the repository root for the real ones)."""
    import grpc_tools
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(ROOT / p) for p in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT, help="output root (default: the repo)")
    args = parser.parse_args(argv)
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
