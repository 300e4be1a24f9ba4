"""The lab shared by the tests that need the 4 x 2 lab with its services.

Building that lab and taking it down again costs tens of seconds on two cores, and two modules
(test_lab_diagnosis.py, test_lab_fabric.py) need the same one, so it is built once for both.
A machine holds one lab at a time (its namespace and link names are global), so the shared lab
is taken down before a test that builds a lab of its own (``no_shared_lab``) and as soon as
the run leaves this folder (where tests/diagnosis/probes builds one too)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from labsupport import lab_fixture

from c4.lab.layout import LabSpec

#: the lab of the shared modules: two leaves of two hosts, two GPUs each, two spines
SHARED_SPEC = LabSpec(hosts=4, gpus_per_host=2)
HERE = Path(__file__).resolve().parent


@dataclass
class LabSlot:
    """At most one shared lab, up from its first user until ``release``."""

    factory: pytest.TempPathFactory
    _lab: Iterator[dict[str, Any]] | None = None
    _state: dict[str, Any] = field(default_factory=dict)

    def shared(self) -> dict[str, Any]:
        if self._lab is None:
            lab = lab_fixture(self.factory.mktemp("lab"), SHARED_SPEC, services=True)
            self._state = next(lab)  # a skip (no root, a lab already up) propagates
            self._lab = lab
        return self._state

    def release(self) -> None:
        """Take the shared lab down and check that nothing of it is left."""
        lab, self._lab = self._lab, None
        if lab is not None:
            next(lab, None)


_slot: LabSlot | None = None


@pytest.fixture(scope="session")
def lab_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabSlot]:
    global _slot
    _slot = LabSlot(tmp_path_factory)
    try:
        yield _slot
    finally:
        _slot.release()
        _slot = None


@pytest.fixture(scope="module")
def shared_lab(lab_slot: LabSlot) -> dict[str, Any]:
    """The running 4 x 2 lab with daemon and sidecars (see the module docstring)."""
    return lab_slot.shared()


@pytest.fixture(scope="module")
def no_shared_lab(lab_slot: LabSlot) -> None:
    """For a module that builds labs of its own: the shared one is taken down first."""
    lab_slot.release()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # after the item's fixtures are torn down: a class's job still clears its faults in the lab
    yield
    if _slot is not None and (nextitem is None or HERE not in Path(nextitem.path).parents):
        _slot.release()
