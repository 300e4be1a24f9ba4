"""The backend registry (``c4.registry``): names taken once, and a backend an installed
package declares as an entry point is loaded the first time its name is asked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from c4.registry import Registry

REPO = Path(__file__).resolve().parents[2]


class PluginError(Exception):
    pass


def test_names_are_taken_once_and_listed_with_their_usage():
    registry: Registry[str] = Registry("thing", PluginError, "c4.tests-nothing")

    def build(arg: str) -> str:
        return f"built {arg}"

    registry.register("a", build, usage="a[:ARG]")
    registry.register("a", build)            # the same factory again: nothing changes
    with pytest.raises(PluginError, match="already registered"):
        registry.register("a", lambda arg: arg)
    with pytest.raises(PluginError, match="without ':'"):
        registry.register("a:b", build)
    assert registry.factory("a")("x") == "built x" and registry.factory("b") is None
    assert registry.names() == ("a",) and registry.usages() == "a[:ARG]"


def test_an_installed_package_adds_a_store_backend_by_entry_point(tmp_path):
    """A real distribution on the path (a dist-info with entry_points.txt) declares the
    ``scratch`` scheme; ``open_store`` finds it without anyone calling ``register``."""
    (tmp_path / "scratch_store.py").write_text(
        "from diagnosis.store.memory import MemoryStore\n"
        "def open_scratch(url):\n"
        "    store = MemoryStore()\n"
        "    store.opened_from = url\n"
        "    return store\n")
    dist = tmp_path / "scratch_store-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: scratch-store\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[c4.stores]\nscratch = scratch_store:open_scratch\n"
                                           "[c4.isolators]\nbroken = scratch_store:missing\n")
    code = ("from diagnosis.store import open_store\n"
            "s = open_store('scratch://x')\n"
            "assert s.opened_from == 'scratch://x', s\n"
            "from recovery.errors import IsolationError\n"
            "from recovery.isolation import open_isolator\n"
            "try:\n"
            "    open_isolator('broken')\n"
            "except IsolationError as exc:\n"
            "    assert 'cannot be loaded' in str(exc), exc\n"
            "else:\n"
            "    raise SystemExit('a broken entry point was not reported')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stderr
