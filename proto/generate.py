"""Regenerate the checked-in protobuf and gRPC code: ``python -m proto.generate``.

The schema lives in the repository's proto/ folder; its Python code is written into the ``c4``
package (``c4/proto/``), so generated modules import each other as ``c4.proto.c4_pb2`` and no
top-level ``proto`` package is ever installed. protoc names imports after the schema's path
under its include root, so the schema is staged at ``c4/proto/c4.proto`` in a scratch include
root before compiling.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: schema file -> the path it is compiled under (which sets the generated modules' package)
PROTOS = {"proto/c4.proto": "c4/proto/c4.proto"}
GENERATED = ["c4/proto/c4_pb2.py", "c4/proto/c4_pb2.pyi", "c4/proto/c4_pb2_grpc.py"]


def generate(out_dir: Path) -> None:
    """Write the generated modules under ``out_dir`` (the repository root for the real ones)."""
    import grpc_tools
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="c4-proto-") as staging:
        include = Path(staging)
        for source, staged in PROTOS.items():
            (include / staged).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / source, include / staged)
        args = [
            "protoc",
            f"-I{include}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            *(str(include / staged) for staged in PROTOS.values()),
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
