"""Fixtures shared by the collector tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from c4.processes import free_port


@pytest.fixture(scope="module")
def one_rank_group() -> Iterator[None]:
    """A one-rank gloo process group in this process, for the module's tests."""
    dist = pytest.importorskip("torch.distributed")
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()
