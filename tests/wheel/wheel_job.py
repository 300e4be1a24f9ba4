"""One rank of a small gloo job run from an installed c4 wheel (not a test module).

``argv[1]``: the folder for this rank's result (JSON); ``argv[2]``: the source checkout, which
must not be on ``sys.path``; ``argv[3] == "install"`` calls ``collectors.install()`` (under
``c4 launch``), otherwise `c4 run` installs the collector when torch.distributed is imported.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if sys.argv[3] == "install":
    import collectors

    collectors.install()

import torch
import torch.distributed as dist

out, checkout = Path(sys.argv[1]), Path(sys.argv[2]).resolve()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
t = torch.ones(16)
for _ in range(10):
    dist.all_reduce(t)
dist.barrier()

import collectors  # noqa: E402  (only now: under c4 run the hook is already there)

installed = collectors.current() is not None
collectors.flush(timeout=5.0)
on_path = [p for p in sys.path if p and Path(p).resolve() == checkout]
(out / f"rank{rank}-{os.environ.get('C4_HOST', 'local')}.json").write_text(json.dumps({
    "rank": rank, "world": world, "sum": float(t[0]), "installed": installed,
    # the collector and the generated protobuf code it ships with, under whatever name
    "modules": {name: m.__file__ for name, m in list(sys.modules.items())
                if name.startswith("collectors") or name.endswith(("_pb2", "_pb2_grpc"))},
    "checkout_on_path": on_path, "pythonpath": os.environ.get("PYTHONPATH")}))
dist.destroy_process_group()
