"""The environment a process c4 starts gets to import c4 (the installed case runs for real in
tests/wheel): from a source checkout, the checkout goes first on PYTHONPATH and what the user
had there stays; installed, nothing is added."""

from __future__ import annotations

import os
import subprocess
import sys

from c4 import processes
from c4.processes import REPO, python_path_env


def test_from_a_checkout_the_checkout_leads_the_users_pythonpath(monkeypatch):
    monkeypatch.setattr(processes, "_site_dirs", set)
    env = python_path_env({"PYTHONPATH": "/opt/site-extra"})
    assert env == {"PYTHONPATH": os.pathsep.join([str(REPO), "/opt/site-extra"])}
    assert python_path_env({}) == {"PYTHONPATH": str(REPO)}


def test_installed_c4_adds_nothing(monkeypatch):
    monkeypatch.setattr(processes, "_site_dirs", lambda: {REPO})
    assert python_path_env({"PYTHONPATH": "/opt/site-extra"}) == {}


def test_a_process_started_elsewhere_with_it_imports_this_c4(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import recovery; print(recovery.__file__)"],
                         cwd=tmp_path, env={**env, **python_path_env(env)}, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == str(REPO / "recovery" / "__init__.py")
