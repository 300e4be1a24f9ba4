"""The recorded topology sources (``shared/fixtures/topology``, described in its FORMATS.md and
SOURCES.md): found next to the repository or a directory above it (a worktree sits deeper), or
where ``C4_SHARED_FIXTURES`` points. Tests that need them skip when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def shared_fixtures() -> Path | None:
    env = os.environ.get("C4_SHARED_FIXTURES")
    candidates = [Path(env)] if env else [p / "shared" / "fixtures" for p in REPO.parents]
    return next((c for c in candidates if (c / "topology").is_dir()), None)


def topo_fixture(name: str, folder: str = "topology") -> Path:
    """The path of one recorded source; skips the test when the shared fixtures are absent."""
    root = shared_fixtures()
    if root is None:
        pytest.skip("shared fixtures not found: ../shared/fixtures next to the repository (or "
                    "above it), or set C4_SHARED_FIXTURES")
    path = root / folder / name
    if not path.exists():
        pytest.skip(f"shared fixture {folder}/{name} is missing")
    return path


A800_MATRIX = "nvidia_smi_topo_m_a800_8gpu_4nic_crlf.txt"
H100_IBDEV = "ibdev2netdev_dgx_h100_12hca.txt"


def recorded_outputs(folder: Path, nvidia_smi: str | None = A800_MATRIX,
                     ibdev2netdev: str | None = H100_IBDEV, lldpctl: str | None = None) -> Path:
    """A directory of recorded tool outputs as ``c4.topology.discover.recorded_runner``
    (and the sidecar's ``--discover DIR``) read them, copied from the shared fixtures."""
    from c4.topology.discover import IBDEV2NETDEV, LLDPCTL, NVIDIA_SMI, RECORDED

    folder.mkdir(parents=True, exist_ok=True)
    for argv, name in ((NVIDIA_SMI, nvidia_smi), (IBDEV2NETDEV, ibdev2netdev),
                       (LLDPCTL, lldpctl)):
        if name is not None:
            (folder / RECORDED[argv]).write_bytes(topo_fixture(name).read_bytes())
    return folder
