"""Which GPU a rank drives, from CUDA_VISIBLE_DEVICES and its local rank or CUDA device."""

from __future__ import annotations

import pytest

from collectors.devices import cuda_device


class FakeCuda:
    """torch.cuda as a machine with (or without) GPUs shows it."""

    def __init__(self, available: bool, current: int | None = None) -> None:
        self.available, self.current = available, current

    def is_available(self) -> bool:
        return self.available

    def is_initialized(self) -> bool:
        return self.current is not None

    def current_device(self) -> int:
        assert self.current is not None
        return self.current


@pytest.mark.parametrize("visible, local, cuda, want", [
    ("4,5,6,7", 1, FakeCuda(True), "5"),                  # launcher gave 4 GPUs, local rank 1
    ("4,5,6,7", 1, FakeCuda(True, current=3), "7"),       # the program chose device 3
    (None, 2, FakeCuda(True), "2"),                       # every GPU visible
    (None, 2, FakeCuda(False), ""),                       # a CPU job
    ("GPU-5f3e0c2a,GPU-77aa", 1, FakeCuda(False), "GPU-77aa"),
    ("2,-1,3", 1, FakeCuda(True), ""),                    # CUDA stops at the invalid entry
    ("", 0, FakeCuda(False), ""),                         # no GPU visible
    ("0,1", 5, FakeCuda(True), ""),                       # more local ranks than GPUs
    ("3", -1, FakeCuda(True), ""),                        # no local rank, CUDA not started
])
def test_cuda_device(visible, local, cuda, want):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert cuda_device(local, env, cuda) == want


def test_a_broken_driver_is_no_gpu():
    class Broken(FakeCuda):
        def is_available(self) -> bool:
            raise RuntimeError("driver mismatch")
    assert cuda_device(0, {}, Broken(True)) == ""
    assert cuda_device(0, {"CUDA_VISIBLE_DEVICES": "6"}, Broken(True)) == "6"
