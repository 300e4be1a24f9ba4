"""CPU cost of the sidecar's health sampling: one HealthWatch pass per interval, CPU time per
pass and the share of one core at a 5 s interval. Target (issue 19): at most 1% of one core.

    python -m bench.health_collect [--passes 200] [--interval 5] [--gpus 8]

Sources: this machine's own /proc (PSI, /proc/stat) and /dev/kmsg (followed, as on a node);
the recorded H100 InfiniBand sysfs tree (3 ports, 46 counters each); GPUs: a recorded
``nvidia-smi -q -x`` document of ``--gpus`` GPUs (the A10G sample repeated) parsed each pass,
without the cost of running nvidia-smi itself (on a node, NVML replaces it and costs less;
nvidia-smi's own process is listed apart: it is not this process's CPU). The machine this
runs on is shared: the numbers are CPU time, not wall time.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from collectors.health.settings import HealthWatchConfig
from collectors.health.watch import HealthWatch
from tests.support.topology_fixtures import shared_fixtures


def _smi_document(gpus: int) -> bytes:
    root = shared_fixtures()
    if root is None:
        raise SystemExit("the shared fixtures are needed (../shared/fixtures or "
                         "C4_SHARED_FIXTURES)")
    xml = (root / "health" / "nvidia_smi_q_x_a10g_driver515_v11_remapped_rows.xml").read_text()
    head, gpu, tail = re.match(r"(.*?)(<gpu id=.*</gpu>)(.*)", xml, re.S).groups()  # type: ignore[union-attr]
    return (head + "".join(gpu.replace("00:1E.0", f"{i:02X}:00.0") for i in range(gpus))
            + tail).encode()


def run(passes: int, interval_s: float, gpus: int) -> Table:
    root = shared_fixtures()
    assert root is not None
    doc = _smi_document(gpus)
    table = Table(title=f"health sampling, CPU per pass ({passes} passes)")
    for col in ("sources", "records/pass", "CPU ms/pass", f"% of a core at {interval_s:g} s"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        sysfs = Path(tmp) / "sys"
        (sysfs / "class").mkdir(parents=True)
        shutil.copytree(root / "health" / "sysfs_class_infiniband_h100",
                        sysfs / "class" / "infiniband")
        cases = [("host (PSI, steal) + kmsg", HealthWatchConfig(gpu="off", sysfs_root=tmp)),
                 ("+ IB sysfs (3 ports)", HealthWatchConfig(gpu="off", sysfs_root=str(sysfs))),
                 (f"+ nvidia-smi XML ({gpus} GPUs)",
                  HealthWatchConfig(gpu="smi", sysfs_root=str(sysfs)))]
        for name, cfg in cases:
            w = HealthWatch("node0", cfg, runner=lambda argv: doc)
            w.poll()
            t0 = time.process_time()
            n = 0
            for _ in range(passes):
                n += len(w.poll())
            per = (time.process_time() - t0) / passes
            w.close()
            table.add_row(name, f"{n / passes:.0f}", f"{per * 1e3:.2f}",
                          f"{100 * per / interval_s:.3f}%")
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--gpus", type=int, default=8)
    a = ap.parse_args(argv)
    con = Console(width=120)
    con.print(run(a.passes, a.interval, a.gpus))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    con.print(f"process CPU {ru.ru_utime + ru.ru_stime:.1f} s; machine shared, load "
              f"{Path('/proc/loadavg').read_text().split()[0]}")


if __name__ == "__main__":
    main()
