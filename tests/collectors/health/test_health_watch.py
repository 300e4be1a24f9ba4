"""The sidecar's health sampler on recorded sources: nvidia-smi XML through the command seam,
a kernel log followed as it grows, the IB sysfs tree, PSI files; and the real /proc here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from collectors.health.settings import HealthWatchConfig, parse_gpu_map
from collectors.health.sources import KmsgFollower, pcie_values
from collectors.health.watch import HealthWatch
from tests.collectors.health.fixtures import health, text

T = 1_700_000_000_000_000_000


def _node(tmp_path: Path) -> tuple[Path, Path]:
    """A sysfs root with the recorded IB tree and a PCI device, and a proc root with PSI."""
    sysfs = tmp_path / "sys"
    (sysfs / "class").mkdir(parents=True)
    shutil.copytree(health("sysfs_class_infiniband_h100"), sysfs / "class" / "infiniband")
    dev = sysfs / "bus/pci/devices/0000:00:1e.0"
    dev.mkdir(parents=True)
    (dev / "current_link_width").write_text("8\n")
    (dev / "max_link_width").write_text("16\n")
    (dev / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    (dev / "max_link_speed").write_text("16.0 GT/s PCIe\n")
    (dev / "aer_dev_correctable").write_text(text("sysfs_pci_aer_dev_correctable_kernel_doc.txt"))
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True)
    for res in ("cpu", "memory", "io"):
        (proc / "pressure" / res).write_text(text(f"psi_proc_pressure_{res}_synthetic"))
    (proc / "stat").write_text("cpu  100 0 50 800 10 0 5 35 0 0\n")
    return sysfs, proc


def test_one_pass_over_recorded_sources(tmp_path: Path) -> None:
    sysfs, proc = _node(tmp_path)
    kmsg = tmp_path / "kmsg.log"
    kmsg.write_text(text("kernel_dev_kmsg_raw_nvswitch.log"))    # the past: not replayed
    xml = health("nvidia_smi_q_x_a10g_driver515_v11_remapped_rows.xml").read_bytes()
    calls = []

    def runner(argv: list[str]) -> bytes:
        calls.append(argv)
        return xml

    cfg = HealthWatchConfig(gpu="smi", kmsg=str(kmsg), sysfs_root=str(sysfs),
                            proc_root=str(proc), gpu_map=parse_gpu_map("0000:00:1e=n1/gpu5"))
    w = HealthWatch("n1", cfg, nic_map={"mlx5_0/1": "n1/nic0"}, runner=runner, clock=lambda: T)
    first = w.poll()
    assert calls == [["nvidia-smi", "-q", "-x"]]
    by = {r.target: r for r in first}
    assert set(by) == {"n1/gpu5", "n1/nic0", "n1"}      # only the mapped port
    gpu = by["n1/gpu5"]
    assert gpu.values["remap_banks_max"] == 192 and gpu.values["pcie_width"] == 8
    assert gpu.values["aer_correctable"] == 2          # from the device's sysfs
    assert by["n1/nic0"].values["port_rcv_errors"] == 14 and by["n1/nic0"].values["up"] == 1
    assert by["n1"].values["psi_cpu_some_avg10"] == 10.0 and "cpu_steal_pct" not in by["n1"].values
    # the kernel logs an XID for that GPU, a link goes down; steal moved on
    with kmsg.open("a") as fh:
        fh.write("4,5000,9000000,-;NVRM: Xid (PCI:0000:00:1e): 79, pid=1, name=python, "
                 "GPU has fallen off the bus.\n")
        fh.write("6,5001,9000001,-;mlx5_core 0000:17:00.0 ib0: Link down\n")
    (proc / "stat").write_text("cpu  150 0 60 880 10 0 5 95 0 0\n")
    events = [r for r in w.poll() if r.event]
    assert [(e.event, e.code, e.component) for e in events] == [("xid", 79, "n1/gpu5"),
                                                                ("ib_link", None, "")]
    assert w.errors == 0


def test_failing_source_is_skipped_and_counted(tmp_path: Path) -> None:
    sysfs, proc = _node(tmp_path)

    def broken(argv: list[str]) -> bytes:
        return b"<not xml"

    w = HealthWatch("n1", HealthWatchConfig(gpu="smi", kmsg="", sysfs_root=str(sysfs),
                                            proc_root=str(proc)), runner=broken)
    recs = w.poll()
    assert w.errors == 1 and {r.target for r in recs} >= {"n1", "n1/mlx5_0/1"}


def test_bad_config_named() -> None:
    with pytest.raises(ValueError, match="not PCI=TOPOLOGY_ID"):
        parse_gpu_map("0000:db:00")
    with pytest.raises(ValueError, match="not a PCI address"):
        parse_gpu_map("gpu0=n1/gpu0")
    with pytest.raises(ValueError, match="one of auto, nvml, smi, dcgm, off"):
        HealthWatchConfig(gpu="rocm")


def test_real_proc_and_kmsg_here() -> None:
    w = HealthWatch("here", HealthWatchConfig(gpu="off"))
    recs = w.poll()
    assert w.errors == 0
    host = [r for r in recs if r.target == "here"]
    if Path("/proc/pressure/cpu").exists():
        assert "psi_cpu_some_avg10" in host[0].values
    k = KmsgFollower("/dev/kmsg")
    assert isinstance(k.read(), list)       # opened at the end: nothing, or only new lines
    k.close()


def test_pcie_values_of_a_real_device_here() -> None:
    devices = sorted(Path("/sys/bus/pci/devices").glob("*"))
    if not devices:
        pytest.skip("no PCI devices visible here")
    vals = pcie_values(devices[0])
    assert all(isinstance(v, float) for v in vals.values())


def test_dcgm_exporter_endpoint_over_a_real_socket(tmp_path: Path) -> None:
    import http.server
    import threading

    scrape = text("dcgm_exporter_metrics_t4_datadog_fixture.prom").encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(scrape)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        w = HealthWatch("n1", HealthWatchConfig(gpu="dcgm", dcgm_url=url, kmsg="",
                                                sysfs_root=str(tmp_path)), clock=lambda: T)
        gpus = [r for r in w.poll() if "/gpu" in r.target]
        # the A10G sample of the fixture has only labels: no record for it
        assert [r.target for r in gpus] == ["n1/gpu0", "n1/gpu0"]
        assert gpus[0].values["sm_clock_mhz"] == 300 and gpus[1].reasons == ("idle",)
    finally:
        server.shutdown()
        server.server_close()
    w = HealthWatch("n1", HealthWatchConfig(gpu="dcgm", dcgm_url=url, kmsg="",
                                            sysfs_root=str(tmp_path)))
    w.poll()
    assert w.errors == 1       # the exporter is gone: logged, counted, the rest still read
