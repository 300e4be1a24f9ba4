"""The environment a launched torchrun gets to import c4 (its installed case runs for real in
tests/wheel): from a source checkout, the checkout goes first on PYTHONPATH and what the user
had there stays."""

from __future__ import annotations

import os
import subprocess
import sys

from recovery import launchers
from recovery.launchers import PACKAGES_ROOT, python_path_env


def test_from_a_checkout_the_checkout_leads_the_users_pythonpath(monkeypatch):
    monkeypatch.setattr(launchers, "_site_dirs", set)
    env = python_path_env({"PYTHONPATH": "/opt/site-extra"})
    assert env == {"PYTHONPATH": os.pathsep.join([str(PACKAGES_ROOT), "/opt/site-extra"])}
    assert python_path_env({}) == {"PYTHONPATH": str(PACKAGES_ROOT)}


def test_installed_c4_adds_nothing(monkeypatch):
    monkeypatch.setattr(launchers, "_site_dirs", lambda: {PACKAGES_ROOT})
    assert python_path_env({"PYTHONPATH": "/opt/site-extra"}) == {}


def test_a_process_started_elsewhere_with_it_imports_this_c4(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import recovery; print(recovery.__file__)"],
                         cwd=tmp_path, env={**env, **python_path_env(env)}, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == str(PACKAGES_ROOT / "recovery" / "__init__.py")
