"""``c4 sidecar``: run the node's sidecar."""

from __future__ import annotations

import socket
from pathlib import Path

import typer


def sidecar(
    daemon: str = typer.Option("127.0.0.1:7444", "--daemon", envvar="C4_DAEMON",
                               help="The diagnosis daemon, HOST:PORT."),
    socket_path: Path = typer.Option(None, "--socket", envvar="C4_SIDECAR_SOCKET",
                                     help="Unix socket the node's ranks write to "
                                          "(default $XDG_RUNTIME_DIR/c4/sidecar.sock or /tmp)."),
    socket_mode: str = typer.Option("0660", "--socket-mode", envvar="C4_SIDECAR_SOCKET_MODE",
                                    help="Permission bits of the socket (octal). Its owner is "
                                         "the sidecar's user; 0666 lets every local user "
                                         "connect (each job stays its first user's)."),
    socket_group: str = typer.Option("", "--socket-group", envvar="C4_SIDECAR_SOCKET_GROUP",
                                     help="Group of the socket, name or number (default: the "
                                          "sidecar's); with mode 0660 only its members (and "
                                          "the sidecar's user) can connect."),
    host: str = typer.Option(None, "--host", envvar="C4_HOST",
                             help="This node's id in the topology (default: hostname)."),
    spill_dir: Path = typer.Option(None, "--spill-dir", envvar="C4_SPILL_DIR",
                                   help="The write-ahead log: every record taken, kept until "
                                        "the daemon acknowledges it (default "
                                        "~/.local/state/c4/spill)."),
    spill_max_bytes: int = typer.Option(1 << 30, "--spill-max-bytes", envvar="C4_SPILL_MAX_BYTES",
                                        help="Disk the log may use; beyond it (or when the disk "
                                             "is full) records are dropped and counted."),
    wal_sync_ms: float = typer.Option(1000.0, "--wal-sync-ms", envvar="C4_WAL_SYNC_MS",
                                      help="fsync what is still undelivered this long after it "
                                           "was logged (all of it in one batch); bounds what a "
                                           "node crash may lose. 0: at once."),
    no_wal: bool = typer.Option(False, "--no-wal", envvar="C4_NO_WAL", hidden=True,
                                help="Keep nothing on disk (only to measure the log's cost: a "
                                     "crash loses records)."),
    batch_records: int = typer.Option(16384, "--batch-records", envvar="C4_BATCH_RECORDS",
                                      help="Records per batch sent to the daemon."),
    max_frame_bytes: int = typer.Option(16 << 20, "--max-frame-bytes",
                                        envvar="C4_SIDECAR_MAX_FRAME_BYTES",
                                        help="Largest frame a local connection may send; a "
                                             "larger one closes it."),
    frame_timeout: float = typer.Option(10.0, "--frame-timeout", envvar="C4_SIDECAR_FRAME_TIMEOUT",
                                        help="Seconds a local connection may take to finish "
                                             "a frame before it is closed."),
    max_collectors: int = typer.Option(4096, "--max-collectors", envvar="C4_SIDECAR_MAX_COLLECTORS",
                                       help="Ranks whose statistics the sidecar forwards."),
    max_request_bytes: int = typer.Option(32 << 20, "--max-request-bytes",
                                          envvar="C4_SIDECAR_MAX_REQUEST_BYTES",
                                          help="Largest request sent to the daemon (keep it under "
                                               "the daemon's 64 MiB message limit); a larger one "
                                               "is dropped and counted."),
    link_interval: float = typer.Option(1.0, "--link-interval", envvar="C4_LINK_INTERVAL",
                                        help="Seconds between samples of connection counters."),
    tls_ca: str = typer.Option("", "--tls-ca", envvar="C4_TLS_CA",
                               help="Reach the daemon over TLS, trusting this CA (PEM)."),
    tls_cert: str = typer.Option("", "--tls-cert", envvar="C4_TLS_CERT",
                                 help="Client certificate (PEM) for a mutual-TLS daemon."),
    tls_key: str = typer.Option("", "--tls-key", envvar="C4_TLS_KEY",
                                help="Private key of --tls-cert."),
    # from the environment only: on the command line every local user could read it
    token: str = typer.Option("", "--token", envvar="C4_TOKEN", hidden=True),
    token_file: str = typer.Option("", "--token-file", envvar="C4_TOKEN_FILE",
                                   help="File holding a bearer token with the ingest role, if "
                                        "the daemon checks tokens; or set C4_TOKEN."),
    metrics: str = typer.Option("", "--metrics", envvar="C4_SIDECAR_METRICS",
                                help="Serve Prometheus /metrics on PORT (loopback) or "
                                     "HOST:PORT; off by default."),
    window: float = typer.Option(1.0, "--window", envvar="C4_WINDOW",
                                 help="Seconds per progress/linkstat window while the daemon "
                                      "reduces a job's telemetry (it may lengthen them)."),
    detail_bytes: int = typer.Option(128 << 20, "--detail-bytes", envvar="C4_DETAIL_BYTES",
                                     help="Memory for the full records of the last minutes, "
                                          "pulled by the daemon around a fault (0: keep none)."),
    ports: str = typer.Option("mapped", "--ports", envvar="C4_PORTS",
                              help="NIC port states and error counters from sysfs: mapped "
                                   "(the ports of --nic-map and of the NICs discovery "
                                   "found), all (every "
                                   "port but lo; unmapped ones as HOST/PORT) or off."),
    sysfs_root: str = typer.Option("/sys", "--sysfs-root", envvar="C4_SYSFS_ROOT",
                                   help="Where sysfs is mounted (for containers and tests)."),
    nic_map: str = typer.Option("", "--nic-map", envvar="C4_NIC_MAP",
                                help="Ports to topology NIC ids, PORT=NIC,...: eth0=node3/nic0, "
                                     "mlx5_0/1=node3/nic1 (InfiniBand: DEVICE/PORT): the ids "
                                     "the ranks announce (C4_NIC) and the topology uses."),
    port_heartbeat: float = typer.Option(30.0, "--port-heartbeat", envvar="C4_PORT_HEARTBEAT",
                                         help="Seconds between port records while nothing "
                                              "changes."),
    health: bool = typer.Option(False, "--health/--no-health", envvar="C4_HEALTH",
                                help="Sample node health (GPU state, kernel XID/AER/link "
                                     "events, IB port counters, PSI, CPU steal) and ship it as "
                                     "health records."),
    health_interval: float = typer.Option(5.0, "--health-interval", envvar="C4_HEALTH_INTERVAL",
                                          help="Seconds between health samples."),
    health_gpu: str = typer.Option("auto", "--health-gpu", envvar="C4_HEALTH_GPU",
                                   help="GPU state from: auto (NVML where nvidia-ml-py is "
                                        "installed and finds a GPU), nvml, smi (nvidia-smi -q "
                                        "-x), dcgm (--dcgm-url), off."),
    dcgm_url: str = typer.Option("http://127.0.0.1:9400/metrics", "--dcgm-url",
                                 envvar="C4_DCGM_URL",
                                 help="dcgm-exporter endpoint for --health-gpu dcgm."),
    gpu_map: str = typer.Option("", "--gpu-map", envvar="C4_GPU_MAP",
                                help="GPU PCI addresses to topology GPU ids, PCI=GPU,...: "
                                     "0000:db:00=node3/gpu7 (default: HOST/gpuINDEX)."),
    health_cgroup: str = typer.Option("", "--health-cgroup", envvar="C4_HEALTH_CGROUP",
                                      help="Read PSI from this cgroup v2 directory (the "
                                           "job's own) instead of the whole host's "
                                           "/proc/pressure."),
    kmsg: str = typer.Option("/dev/kmsg", "--kmsg", envvar="C4_KMSG",
                             help="Kernel log to follow for XID, AER and link events ('' : "
                                  "none)."),
    discover: str = typer.Option("on", "--discover", envvar="C4_DISCOVER",
                                 help="Tell the daemon what this host is made of (GPUs, NICs, "
                                      "which NIC each GPU uses, switch ports): on (run "
                                      "nvidia-smi topo -m, ibdev2netdev, lldpctl, read sysfs), "
                                      "off, or a DIRECTORY of their saved outputs "
                                      "(nvidia-smi.txt, ibdev2netdev.txt, lldpctl.json)."),
    discover_interval: float = typer.Option(300.0, "--discover-interval",
                                            envvar="C4_DISCOVER_INTERVAL",
                                            help="Seconds between discoveries; what changed is "
                                                 "sent again."),
    nccl_job: str = typer.Option("", "--nccl-job", envvar="C4_NCCL_JOB",
                                 help="The job whose NCCL telemetry this node reads (with "
                                      "--nccl-inspector and/or --nccl-ras)."),
    nccl_inspector: Path = typer.Option(None, "--nccl-inspector", envvar="C4_NCCL_INSPECTOR",
                                        help="Follow this NCCL Inspector dump directory "
                                             "(NCCL_INSPECTOR_DUMP_DIR of the job's processes) "
                                             "and ship its calls; processes whose c4 hook "
                                             "reports already are skipped."),
    nccl_ras: str = typer.Option(None, "--nccl-ras", envvar="C4_NCCL_RAS", metavar="ADDR",
                                 help="Poll NCCL RAS at ADDR (host:port; \"\": NCCL_RAS_ADDR "
                                      "or localhost:28028) and ship the ranks it finds."),
    nccl_interval: float = typer.Option(1.0, "--nccl-interval", envvar="C4_NCCL_INTERVAL",
                                        help="Seconds between reads of the Inspector files."),
    nccl_ras_interval: float = typer.Option(10.0, "--nccl-ras-interval",
                                            envvar="C4_NCCL_RAS_INTERVAL",
                                            help="Seconds between RAS polls."),
) -> None:
    """Run the per-node sidecar: take the local ranks' records and ship them to the daemon."""
    import signal
    import threading

    from collectors.health.watch import HealthWatchConfig, parse_gpu_map
    from collectors.sidecar.config import SidecarConfig
    from collectors.sidecar.edge_config import EdgeConfig
    from collectors.sidecar.errors import SidecarError
    from collectors.sidecar.local import parse_mode
    from collectors.sidecar.nccl_source import NcclSourceConfig
    from collectors.sidecar.ports import parse_nic_map
    from collectors.sidecar.sidecar import Sidecar
    from collectors.wire import default_socket_path

    # Handlers first: a SIGTERM while the sidecar starts (its socket already exists) must stop
    # it cleanly, not kill it.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kwargs = {}
    if spill_dir is not None:
        kwargs["spill_dir"] = spill_dir
    from c4.security.secret import read_token

    try:
        token = read_token(token, token_file)
        edge = EdgeConfig(window_s=window, ring_bytes=detail_bytes, ports=ports,
                          sysfs_root=sysfs_root, nic_map=tuple(parse_nic_map(nic_map).items()),
                          port_heartbeat_s=port_heartbeat,
                          health=HealthWatchConfig(interval_s=health_interval, gpu=health_gpu,
                                                   dcgm_url=dcgm_url,
                                                   kmsg=kmsg, sysfs_root=sysfs_root,
                                                   cgroup_dir=health_cgroup,
                                                   gpu_map=parse_gpu_map(gpu_map))
                          if health else None)
        config = SidecarConfig(daemon=daemon, socket_path=socket_path or default_socket_path(),
                               socket_mode=parse_mode(socket_mode), socket_group=socket_group,
                               host=host or socket.gethostname(), spill_max_bytes=spill_max_bytes,
                               wal_sync_interval_s=wal_sync_ms / 1000.0, wal=not no_wal,
                               batch_records=batch_records, max_frame_bytes=max_frame_bytes,
                               frame_timeout_s=frame_timeout, max_collectors=max_collectors,
                               max_request_bytes=max_request_bytes,
                               link_interval_s=link_interval,
                               tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token,
                               metrics_listen=metrics, edge=edge, discover=discover,
                               discover_interval_s=discover_interval, **kwargs)
        if nccl_job or nccl_inspector is not None or nccl_ras is not None:
            from dataclasses import replace

            config = replace(config, nccl=NcclSourceConfig(
                nccl_job, nccl_inspector, nccl_ras, interval_s=nccl_interval,
                ras_interval_s=nccl_ras_interval))
        car = Sidecar(config)
        car.start()
    except (ValueError, OSError, SidecarError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"c4 sidecar {car.id} listening on {config.socket_path}, daemon {daemon}")
    # In slices: the kernel may deliver SIGTERM to another thread, and Python runs the handler
    # only when the main thread next runs Python; an untimed wait would never return.
    while not stop.wait(0.5):
        pass
    car.stop()
    s = car.stats()
    typer.echo(f"c4 sidecar stopped: received {s.received} records, shipped {s.shipped} "
               f"requests, dropped {s.dropped} records (counted by reason in its metrics), "
               f"{car.outbox.pending()} requests left in the log")


def register(app: typer.Typer) -> None:
    app.command("sidecar")(sidecar)
