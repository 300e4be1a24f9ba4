"""Shell completion of ``c4``, as a shell runs it: the script ``--show-completion`` prints, and
the completions the program gives for partial command lines (a real subprocess each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _c4(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-m", "c4", *args], capture_output=True, text=True,
                          env=full, cwd=REPO, timeout=60)


def test_show_completion_prints_a_bash_function_for_c4():
    out = _c4("--show-completion", "bash")
    assert out.returncode == 0, out.stderr
    assert "complete -o default -F _c4_completion c4" in out.stdout


def _complete(line: str) -> list[str]:
    words = line.split(" ")
    out = _c4(_C4_COMPLETE="complete_bash", COMP_WORDS=line, COMP_CWORD=str(len(words) - 1))
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_commands_and_format_values_complete():
    assert _complete("c4 faults sh") == ["show"]
    assert set(_complete("c4 fa")) == {"faults"}
    assert set(_complete("c4 faults list --format j")) == {"json", "jsonl"}
