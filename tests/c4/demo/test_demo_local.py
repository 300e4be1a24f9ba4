"""The README's first command, in its no-root form: `c4 demo --local` runs the whole loop with
real processes (daemon, sidecars, recovery controller, supervisor, a torchrun job) and must end
with the hung host isolated and the job resumed from a checkpoint."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.network, pytest.mark.slow]


def test_demo_local_runs_the_whole_loop():
    out = subprocess.run([sys.executable, "-m", "c4", "demo", "--local"], capture_output=True,
                         text=True, timeout=900, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin",
                                                      **_python_env()})
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "c4 reported noncomm_slow" in text and "planted at node3" in text
    assert re.search(r"c4 reported noncomm_hang: rank \d \(node1\)", text), text[-4000:]
    assert "recovery isolated node1" in text
    assert re.search(r"resumed: attempt 1 at step \d+", text)
    assert "ETTR" in text
    # one frozen process, one incident: the hang alone (no `error` "stopped reporting" beside
    # it, not even for a moment), and the recovery waits out its --hang-grace (10 s in the
    # demo) before it isolates the node
    assert not re.search(r"│\s+error\s+│", text), text[-4000:]
    planted = float(re.search(r"\[ *(\d+) s\] fault 2 planted: hang", text).group(1))
    isolated = float(re.search(r"\[ *(\d+) s\] recovery isolated", text).group(1))
    assert isolated - planted >= 9, text[-4000:]
    # piped: the recovery table's columns are whole words, and no line is padded to the
    # 100,000 columns a pipe is given
    assert re.search(r"reported +┃ isolated +┃ stopped +┃ relaunched", text), text[-4000:]
    assert max(len(line) for line in text.splitlines()) < 2000


def _python_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "PATH")}
