"""``--isolator`` values are built by the backend registered under their name, and a backend's
module is imported only when it is asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest

from recovery.errors import IsolationError
from recovery.isolation import isolator_registry, open_isolator
from recovery.isolation.blocklist import BlocklistIsolator


def test_blocklist_spec_builds_a_working_isolator(tmp_path):
    path = tmp_path / "blocked.json"
    iso = open_isolator(f"blocklist:{path}")
    assert isinstance(iso, BlocklistIsolator) and iso.path == path
    iso.isolate("node3", "c4: test")
    assert dict(open_isolator(f"blocklist:{path}").isolated()) == {"node3": "c4: test"}


def test_unknown_and_malformed_specs_say_what_to_use():
    with pytest.raises(IsolationError) as err:
        open_isolator("lsf")
    for usage in ("blocklist[:PATH]", "slurm", "kubernetes[:NAMESPACE]"):
        assert usage in str(err.value)
    with pytest.raises(IsolationError, match="takes no argument"):
        open_isolator("slurm:partition")
    assert {"blocklist", "slurm", "kubernetes", "k8s"} <= set(isolator_registry.names())


def test_a_registered_backend_is_built_with_its_argument(tmp_path):
    isolator_registry.register("file-test",
                               lambda arg: BlocklistIsolator(tmp_path / (arg or "default")),
                               usage="file-test[:NAME]")
    assert open_isolator("file-test:x").path == tmp_path / "x"
    assert open_isolator("file-test").path == tmp_path / "default"
    with pytest.raises(IsolationError, match="already registered"):
        isolator_registry.register("file-test", lambda arg: BlocklistIsolator())


def test_backends_are_imported_only_when_asked_for(tmp_path):
    code = ("import sys\n"
            "from recovery.isolation import open_isolator\n"
            "loaded = [m for m in ('recovery.isolation.kubernetes', 'recovery.isolation.slurm',"
            " 'recovery.isolation.blocklist') if m in sys.modules]\n"
            "assert not loaded, loaded\n"
            f"open_isolator('blocklist:{tmp_path}/b.json')\n"
            "assert 'recovery.isolation.kubernetes' not in sys.modules\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
