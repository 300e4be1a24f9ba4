"""The checkpoint helper on a real (one-rank) gloo group and real DCP files: asynchronous
saves become complete only with their marker; torn, partial and garbled checkpoints are
skipped with a warning and the newest whole one is loaded, never a partial one."""

from __future__ import annotations

import json
import logging

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from recovery.checkpoint import MARKER, Checkpointer, latest_complete, list_complete  # noqa: E402
from recovery.progress import ProgressReader, ProgressWriter  # noqa: E402


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", rank=0, world_size=1,
                            store=dist.FileStore(str(tmp_path / "store"), 1))
    yield
    dist.destroy_process_group()


def _state(step: int) -> dict:
    return {"w": torch.full((64, 32), float(step)), "b": torch.arange(16.0) * step}


def test_torn_partial_and_garbled_checkpoints_are_never_loaded(group, tmp_path, caplog):
    root = tmp_path / "ckpt"
    ckpt = Checkpointer(root, keep=4, progress=ProgressWriter(tmp_path / "progress.jsonl"))
    assert ckpt.use_async
    for step in (5, 10, 15, 20):
        ckpt.save(step, _state(step))
        ckpt.step_done(step)
    ckpt.close()
    assert [c.step for c in list_complete(root)] == [5, 10, 15, 20]
    marker = json.loads((root / "step-000000020" / MARKER).read_text())
    assert marker["step"] == 20 and marker["world_size"] == 1
    # the supervisor sees each checkpoint once it is complete
    reader = ProgressReader(tmp_path / "progress.jsonl")
    assert [r["step"] for r in reader.poll() if r["event"] == "checkpoint"] == [5, 10, 15, 20]

    # 20: a data file torn (marker present: the disk lost the tail)
    data = next(p for p in (root / "step-000000020").iterdir() if p.suffix == ".distcp")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    # 15: the marker never written (the job died while saving)
    (root / "step-000000015" / MARKER).unlink()
    # 10: a garbled marker
    (root / "step-000000010" / MARKER).write_text('{"step": 1')
    # 25: a save in flight: data, no metadata, no marker
    (root / "step-000000025").mkdir()
    (root / "step-000000025" / "__0_0.distcp").write_bytes(b"\0" * 100)

    with caplog.at_level(logging.WARNING, logger="recovery.checkpoint"):
        assert latest_complete(root).step == 5
    why = " ".join(r.getMessage() for r in caplog.records)
    assert "torn" in why and "no completion marker" in why and "unreadable completion marker" \
        in why
    state = _state(0)
    assert Checkpointer(root).load(state) == 5
    assert torch.equal(state["w"], _state(5)["w"]) and torch.equal(state["b"], _state(5)["b"])


def test_empty_directory_means_start_from_scratch(group, tmp_path):
    state = _state(7)
    assert Checkpointer(tmp_path / "none").load(state) is None
    assert torch.equal(state["w"], _state(7)["w"])


def test_keep_prunes_old_complete_checkpoints_and_dead_partials(group, tmp_path):
    root = tmp_path / "ckpt"
    (root / "step-000000001").mkdir(parents=True)       # a partial save of a dead attempt
    ckpt = Checkpointer(root, keep=2, use_async=False)
    for step in (2, 3, 4):
        ckpt.save(step, _state(step))
    assert sorted(p.name for p in root.iterdir()) == ["step-000000003", "step-000000004"]
