"""``c4 daemon``: run the central diagnosis daemon."""

from __future__ import annotations

import typer

from diagnosis.daemon.config import DEFAULT_ADDRESS


def daemon(
    listen: str = typer.Option(DEFAULT_ADDRESS, "--listen", envvar="C4_LISTEN",
                               help="HOST:PORT to serve gRPC on (loopback unless told otherwise)."),
    store: str = typer.Option("", "--store", envvar="C4_STORE",
                              help="sqlite:///PATH (default under ~/.local/share/c4) or "
                                   "clickhouse://USER:PASS@HOST:PORT/DB."),
    topology: str = typer.Option("", "--topology", envvar="C4_TOPOLOGY",
                                 help="Cluster topology file (node-link JSON) for localization; "
                                      "each job's hosts, as their sidecars discover them, "
                                      "are merged into it."),
    analyze_interval: float = typer.Option(1.0, "--analyze-interval", envvar="C4_ANALYZE_INTERVAL",
                                           help="Seconds between runs of the live detectors."),
    tls_cert: str = typer.Option("", "--tls-cert", envvar="C4_TLS_CERT",
                                 help="PEM certificate: serve gRPC over TLS (with --tls-key)."),
    tls_key: str = typer.Option("", "--tls-key", envvar="C4_TLS_KEY",
                                help="PEM private key of --tls-cert."),
    tls_client_ca: str = typer.Option("", "--tls-client-ca", envvar="C4_TLS_CLIENT_CA",
                                      help="Mutual TLS: require client certificates signed by "
                                           "this CA (PEM)."),
    tokens: str = typer.Option("", "--tokens", envvar="C4_TOKENS_FILE",
                               help="Token file, one `TOKEN ROLE` per line (roles: ingest, read, "
                                    "act, admin); also C4_INGEST_TOKEN, C4_READ_TOKEN, "
                                    "C4_ACT_TOKEN, C4_ADMIN_TOKEN. None: no token checks."),
    insecure: bool = typer.Option(False, "--insecure", envvar="C4_INSECURE",
                                  help="Allow plaintext gRPC on a non-loopback address."),
    max_rps: float = typer.Option(1000.0, "--max-requests-per-second", envvar="C4_MAX_RPS",
                                  help="Ingest requests (batches) per second per sender (its "
                                       "certificate or token, and its address); over it the "
                                       "sender is told to back off (0: no limit)."),
    max_jobs: int = typer.Option(10_000, "--max-jobs", envvar="C4_MAX_JOBS",
                                 help="Live jobs (heard from within --job-idle) the daemon "
                                      "follows at once; one more waits: its sidecars hold its "
                                      "telemetry back and resend it later, while their other "
                                      "jobs flow."),
    job_idle: str = typer.Option("30m", "--job-idle", envvar="C4_JOB_IDLE",
                                 help="A job silent this long is no longer live: it leaves the "
                                      "live view and stops counting against --max-jobs "
                                      "(e.g. 30m, 2h)."),
    retention: str = typer.Option("30d", "--retention", envvar="C4_RETENTION",
                                  help="Jobs silent this long are removed from the store, and "
                                       "the requests it remembers (to recognise resends) "
                                       "forgotten; records older than this are refused. 0: "
                                       "keep everything."),
    max_ranks: int = typer.Option(262_144, "--max-ranks", envvar="C4_MAX_RANKS",
                                  help="Ranks per job (world size, rank ids, communicator "
                                       "sizes); more are refused."),
    max_groups: int = typer.Option(65_536, "--max-groups", envvar="C4_MAX_GROUPS",
                                   help="Communicators per job; more are refused."),
    max_names: int = typer.Option(65_536, "--max-names", envvar="C4_MAX_NAMES",
                                  help="Names (communicators, ops, endpoints) one batch may "
                                       "carry; a batch with more is refused."),
    max_record_age: str = typer.Option("30d", "--max-record-age", envvar="C4_MAX_RECORD_AGE",
                                       help="Records older than this (by the daemon's clock) "
                                            "are refused; at most --retention."),
    max_clock_ahead: str = typer.Option("1h", "--max-clock-ahead",
                                        envvar="C4_MAX_CLOCK_AHEAD",
                                        help="Records stamped further ahead of the daemon's "
                                             "clock are refused (node clocks off)."),
    job_memory: str = typer.Option("4G", "--job-memory", envvar="C4_JOB_MEMORY",
                                   help="Memory one job may take in the live view (an "
                                        "estimate from its ranks and communicators); a "
                                        "registration past it is refused."),
    live_memory: str = typer.Option("0", "--live-memory", envvar="C4_LIVE_MEMORY",
                                    help="Memory all live jobs together may take (estimated); "
                                         "past it a growing job waits like one over "
                                         "--max-jobs. 0: half this machine's memory."),
    max_streams: int = typer.Option(480, "--max-streams", envvar="C4_MAX_STREAMS",
                                    help="Ingest streams (sidecars) served at once; more are "
                                         "told to back off. Needs --workers above it."),
    max_watches: int = typer.Option(0, "--max-watches", envvar="C4_MAX_WATCHES",
                                    help="`c4 faults watch` streams served at once; more are "
                                         "refused. 0: half the threads --max-streams leaves."),
    workers: int = typer.Option(512, "--workers", envvar="C4_WORKERS",
                                help="RPC threads: one per open ingest stream and fault watch, "
                                     "plus queries."),
    metrics: str = typer.Option("", "--metrics", envvar="C4_METRICS",
                                help="Serve Prometheus /metrics on PORT (loopback) or "
                                     "HOST:PORT (HTTPS with --tls-cert; plaintext beyond "
                                     "loopback needs --metrics-insecure); off by default."),
    metrics_insecure: bool = typer.Option(False, "--metrics-insecure",
                                          envvar="C4_METRICS_INSECURE",
                                          help="Allow plaintext /metrics on a non-loopback "
                                               "address."),
    job_records: float = typer.Option(200_000.0, "--job-records-per-s",
                                      envvar="C4_JOB_RECORDS_PER_S",
                                      help="Records per second one job may send, every kind "
                                           "together. Over it the job's calls are sampled (K, "
                                           "a power of two, told to its sidecars) and, at "
                                           "--max-sample, its windows lengthened. 0: no "
                                           "budget (every call, always)."),
    max_sample: int = typer.Option(1024, "--max-sample", envvar="C4_MAX_SAMPLE",
                                   help="The largest sampling factor K (a power of two)."),
    sample: int = typer.Option(0, "--sample", envvar="C4_SAMPLE",
                               help="Sample every job's calls at this factor K (a power of "
                                    "two) from its start, whatever its rate; 0: K from the "
                                    "budget."),
    calls_per_rank: float = typer.Option(400.0, "--calls-per-rank", envvar="C4_CALLS_PER_RANK",
                                         help="Calls per second a rank is taken to make until "
                                              "its job is measured: a job too large for the "
                                              "budget at that rate starts sampled. 0: every "
                                              "job starts at K = 1."),
    window: float = typer.Option(1.0, "--window", envvar="C4_WINDOW",
                                 help="The sidecars' progress/linkstat window (seconds): "
                                      "the one they use until told otherwise."),
    max_window: float = typer.Option(16.0, "--max-window", envvar="C4_MAX_WINDOW",
                                     help="The longest window the budget may set (seconds)."),
    detail: bool = typer.Option(True, "--detail/--no-detail", envvar="C4_DETAIL",
                                help="Pull the full records around each report from the "
                                     "nodes involved, for jobs whose calls are sampled."),
    detail_records: int = typer.Option(200_000, "--detail-records",
                                       envvar="C4_DETAIL_RECORDS",
                                       help="Most full records per node and report."),
    inspect: bool = typer.Option(True, "--inspect/--no-inspect", envvar="C4_INSPECT",
                                 help="Add to hang reports the blamed process's PID and host, "
                                      "its Python stack (py-spy, by the sidecar of its node) "
                                      "and a Flight Recorder dump request."),
    inspect_hosts: str = typer.Option("", "--inspect-hosts", envvar="C4_INSPECT_HOSTS",
                                      help="Comma-separated host ids (as ranks report them) "
                                           "that run on this machine (default: its hostname)."),
) -> None:
    """Run the diagnosis daemon: ingest telemetry, store it, detect faults, serve queries."""
    from c4.errors import C4Error
    from diagnosis.daemon.bounds import Bounds
    from diagnosis.daemon.budget import BudgetConfig
    from diagnosis.daemon.config import DaemonConfig, parse_duration, parse_size
    from diagnosis.daemon.detail import DetailConfig
    from diagnosis.daemon.inspection import InspectConfig
    from diagnosis.daemon.jobs import JobLimits
    from diagnosis.daemon.server import serve

    topo = None
    try:
        if topology:
            from c4.topology import Topology

            topo = Topology.load(topology)
        config = DaemonConfig(listen=listen, store=store, analyze_interval_s=analyze_interval,
                              tls_cert=tls_cert, tls_key=tls_key, tls_client_ca=tls_client_ca,
                              tokens_file=tokens, insecure=insecure,
                              max_requests_per_second=max_rps,
                              jobs=JobLimits(max_jobs=max_jobs, idle_s=parse_duration(job_idle),
                                             max_groups=max_groups,
                                             job_memory_bytes=parse_size(job_memory),
                                             live_memory_bytes=parse_size(live_memory)),
                              bounds=Bounds(max_ranks=max_ranks, max_names=max_names,
                                            max_age_s=parse_duration(max_record_age),
                                            max_ahead_s=parse_duration(max_clock_ahead)),
                              retention_s=parse_duration(retention),
                              max_streams=max_streams, max_watches=max_watches, workers=workers,
                              metrics_listen=metrics, metrics_insecure=metrics_insecure,
                              budget=BudgetConfig(records_per_s=job_records,
                                                  max_sample=max_sample, window_s=window,
                                                  max_window_s=max_window,
                                                  fixed_sample=sample,
                                                  calls_per_rank=calls_per_rank),
                              detail=DetailConfig(enabled=detail, max_records=detail_records),
                              inspect=InspectConfig(
                                  enabled=inspect, local_hosts=frozenset(
                                      h.strip() for h in inspect_hosts.split(",") if h.strip())))
        def ready(d) -> None:
            tls = "mutual TLS" if tls_client_ca else "TLS" if tls_cert else "plaintext"
            typer.echo(f"c4 daemon listening on {listen.rsplit(':', 1)[0]}:{d.port} ({tls}, "
                       f"{len(d.tokens) or 'no'} tokens, store {config.store})")
            if d.metrics_server is not None:
                m = d.metrics_server
                typer.echo(f"metrics on {m.scheme}://{m.host}:{m.port}/metrics")

        serve(config, topology=topo, on_ready=ready, topology_source=topology)
    except (C4Error, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    app.command("daemon")(daemon)
