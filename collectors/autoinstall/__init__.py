"""Install the collector without touching the training script.

``c4 run`` prepends ``SITE_DIR`` to ``PYTHONPATH`` and sets ``C4_COLLECT=1``. Every Python process
of the job then runs ``SITE_DIR/sitecustomize.py`` at start-up, which calls ``enable()``: that adds
a one-shot finder to ``sys.meta_path`` and nothing else. Only when the program imports
``torch.distributed`` does the finder let the import run and then call ``collectors.install()``.
Processes that never import torch (shell helpers, compilers, tools) pay one string comparison per
import; processes that import torch but never initialise a process group (torchrun's launcher,
data-loader workers) get patched functions but never connect or start a thread.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

SITE_DIR = Path(__file__).resolve().parent / "sitedir"
ENV_COLLECT = "C4_COLLECT"
_TARGET = "torch.distributed"


def _install_quietly() -> None:
    try:
        import collectors

        collectors.install()
    except Exception as exc:  # telemetry must never stop a training job from starting
        sys.stderr.write(f"c4: collector not installed: {exc}\n")


class _InstallAfterImport(importlib.abc.Loader):
    """Runs the real loader, then installs the collector, then steps out of the way."""

    def __init__(self, spec: importlib.machinery.ModuleSpec,
                 loader: importlib.abc.Loader) -> None:
        self._spec = spec
        self._loader = loader   # the spec's own

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Give the module its real loader back before anything can look at it.
        self._spec.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        _install_quietly()


class TorchDistributedWatcher(importlib.abc.MetaPathFinder):
    """A meta-path finder that reacts to the import of ``torch.distributed`` only."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _TARGET:
            return None
        disable()  # one-shot, and no recursion while the other finders look
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _InstallAfterImport(spec, spec.loader)
        return spec


def enable() -> None:
    """Install now if torch.distributed is already imported, else when it is."""
    if _TARGET in sys.modules:
        _install_quietly()
        return
    if not any(isinstance(f, TorchDistributedWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchDistributedWatcher())


def disable() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TorchDistributedWatcher)]
