"""The supervisor's command parsing and host choice (no processes: the end-to-end test runs the
supervisor for real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.errors import LaunchError
from recovery.isolation.blocklist import BlocklistIsolator
from recovery.journal import Journal
from recovery.supervisor import LaunchConfig, Supervisor, split_command


@pytest.mark.parametrize(("command", "opts", "script"), [
    (["train.py", "--lr", "3"], [], ["train.py", "--lr", "3"]),
    (["torchrun", "--nnodes", "8", "--max-restarts=0", "--standalone", "train.py", "-x"],
     ["--max-restarts=0"], ["train.py", "-x"]),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node", "8", "--monitor-interval",
      "1", "train.py"], ["--monitor-interval", "1"], ["train.py"]),
])
def test_split_command_keeps_what_the_supervisor_does_not_set(command, opts, script):
    assert split_command(command) == (opts, script)


def test_split_command_without_a_script():
    with pytest.raises(LaunchError, match="no training script"):
        split_command(["torchrun", "--nnodes", "2"])


def test_hosts_replaced_by_spares_then_shrunk(tmp_path: Path):
    cfg = LaunchConfig(job="j", hosts=("a", "b", "c"), spares=("s1", "s2"),
                       command=("train.py",), workdir=tmp_path / "w", min_hosts=2)
    sup = Supervisor(cfg, BlocklistIsolator(tmp_path / "b.json"), Journal(tmp_path / "j.db"))
    assert sup.choose_hosts(set()) == ["a", "b", "c"]
    assert sup.choose_hosts({"b"}) == ["a", "c", "s1"]
    assert sup.choose_hosts({"b", "s1"}) == ["a", "c", "s2"]
    assert sup.choose_hosts({"b", "c", "s1"}) == ["a", "s2"]
    with pytest.raises(LaunchError, match="c4 nodes release"):
        sup.choose_hosts({"a", "b", "s1", "s2"})


def test_config_errors_are_named(tmp_path: Path):
    with pytest.raises(LaunchError, match="repeat"):
        LaunchConfig(job="j", hosts=("a", "a"), command=("t.py",), workdir=tmp_path)
    with pytest.raises(LaunchError, match="--min-hosts"):
        LaunchConfig(job="j", hosts=("a",), command=("t.py",), workdir=tmp_path, min_hosts=2)
