"""A built wheel ships the generated protobuf code as ``c4.proto`` and no top-level ``proto``
package, which would collide with anything else of that name in an environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTS = {"c4", "collectors", "diagnosis", "traffic_planner", "recovery"}


@pytest.mark.slow
def test_the_wheel_has_c4_proto_and_no_top_level_proto(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="builds the wheel without network access")
    src = tmp_path / "src"   # a copy, so that the build leaves nothing in the checkout
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(src)], check=True)
    [wheel] = (tmp_path / "dist").glob("c4-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == PARTS
    assert {"c4/proto/c4_pb2.py", "c4/proto/c4_pb2_grpc.py", "c4/proto/codec.py"} <= set(names)

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True)
    probe = ("import c4.proto, c4.proto.c4_pb2_grpc as g; from c4.proto import c4_pb2; "
             "print(c4.proto.__file__); print(c4_pb2.HealthSample.DESCRIPTOR.full_name)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(target)})
    where, message = out.stdout.split()
    assert Path(where).is_relative_to(target), f"imported {where}, not the wheel's copy"
    assert message == "c4.v1.HealthSample"
