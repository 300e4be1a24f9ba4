"""One rank of the SIGTERM jobs of test_collector_sigterm.py (not a test module itself).

argv: MODE CALLS GO_FILE. Every rank makes CALLS all_reduces on the world group, then:

- ``blocked``: rank 0 calls one more all_reduce, which blocks (rank 1 joins it only once GO_FILE
  exists) and prints "blocked" once the collector holds that call as pending; rank 1 prints
  "waiting" and polls for GO_FILE in Python.
- ``busy``: prints "busy" and computes in Python until stopped.

``handler`` in MODE (``blocked-handler``, ``busy-handler``): the program installs its own
SIGTERM handler, which prints "handler" and exits with status 7; ``busy-handler`` installs it
before the collector arms (before init_process_group), ``blocked-handler`` after.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import collectors

collectors.install()

import torch  # noqa: E402  (after install(), as a training script would do it)
import torch.distributed as dist  # noqa: E402

mode, calls, go_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def own_handler(signum: int, frame: object) -> None:
    print("handler", flush=True)
    # As torch asks of a program that exits: a process leaving with its gloo group still up
    # aborts now and then in torch's teardown ("terminate called without an active
    # exception"), with or without c4 (5 runs in 40 of this job without c4, on a loaded machine).
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(7)


if mode == "busy-handler":
    signal.signal(signal.SIGTERM, own_handler)
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
if mode == "blocked-handler":
    signal.signal(signal.SIGTERM, own_handler)
t = torch.ones(8)
for _ in range(calls):
    dist.all_reduce(t)


def in_hook(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "hooked":
            return True
        frame = frame.f_back
    return False


def report_when_pending() -> None:
    pending = collectors.current().buffer.pending
    main = threading.main_thread().ident
    while not (pending and in_hook(sys._current_frames()[main])):
        time.sleep(0.01)
    print("blocked", flush=True)


if mode.startswith("blocked"):
    if rank == 0:
        threading.Thread(target=report_when_pending, daemon=True).start()
        dist.all_reduce(t)
        print("returned", flush=True)
    else:
        print("waiting", flush=True)
        while not os.path.exists(go_file):
            time.sleep(0.01)
        dist.all_reduce(t)
    time.sleep(60)  # the test stops us; a handler-less rank must not get here
else:
    print("busy", flush=True)
    x = 0
    while True:
        x = (x * 31 + 7) % 1000003
