"""Relay settings, declared once (``c4.settings``): ``c4 relay``'s options are derived from
them."""

from __future__ import annotations

from dataclasses import dataclass

from c4.settings import at_least, positive, setting, validate
from diagnosis.errors import ConfigError

DEFAULT_RELAY_ADDRESS = "127.0.0.1:7445"


@dataclass(frozen=True)
class RelayConfig:
    listen: str = setting(DEFAULT_RELAY_ADDRESS, flag="--listen", env="C4_RELAY_LISTEN",
                          help="HOST:PORT the sidecars stream to (loopback unless told "
                               "otherwise).")
    daemon: str = setting("127.0.0.1:7444", flag="--daemon", env="C4_DAEMON",
                          help="The diagnosis daemon, HOST:PORT.")
    # Reaching the daemon, as a sidecar does: TLS files, and an ingest token from the
    # environment (on the command line every local user could read it).
    daemon_tls_ca: str = setting("", flag="--daemon-tls-ca", env="C4_TLS_CA",
                                 help="Reach the daemon over TLS, trusting this CA (PEM).")
    daemon_tls_cert: str = setting("", flag="--daemon-tls-cert", env="C4_TLS_CERT",
                                   help="Client certificate (PEM) for a mutual-TLS daemon.")
    daemon_tls_key: str = setting("", flag="--daemon-tls-key", env="C4_TLS_KEY",
                                  help="Private key of --daemon-tls-cert.")
    token: str = setting("", flag="--token", env="C4_TOKEN", hidden=True)
    upstreams: int = setting(4, flag="--upstreams", env="C4_RELAY_UPSTREAMS",
                             check=at_least(1),
                             help="Streams to the daemon; each sidecar stream rides one of "
                                  "them, so its requests stay in order.")
    # As the daemon's: every sidecar stream holds an RPC thread; more than ``max_streams`` at
    # once are refused with RESOURCE_EXHAUSTED rather than left waiting for one.
    workers: int = setting(512, flag="--workers", env="C4_WORKERS", check=at_least(2),
                           help="RPC threads: one per sidecar stream.")
    max_streams: int = setting(480, flag="--max-streams", env="C4_MAX_STREAMS",
                               check=at_least(1),
                               help="Sidecar streams served at once; more are told to back "
                                    "off. Needs --workers above it.")
    # Requests queued for one stream to the daemon; past it the sidecars' streams wait
    # (backpressure reaches the sidecars, whose outboxes hold the rest).
    queue_requests: int = setting(1024, check=at_least(1))
    reconnect_max_s: float = setting(5.0, check=positive)
    max_message_bytes: int = setting(64 * 1024 * 1024, check=at_least(1))
    tls_cert: str = setting("", flag="--tls-cert", env="C4_RELAY_TLS_CERT",
                            help="PEM certificate: serve the sidecars over TLS (with "
                                 "--tls-key).")
    tls_key: str = setting("", flag="--tls-key", env="C4_RELAY_TLS_KEY",
                           help="PEM private key of --tls-cert.")
    tls_client_ca: str = setting("", flag="--tls-client-ca", env="C4_RELAY_TLS_CLIENT_CA",
                                 help="Mutual TLS: require sidecar certificates signed by this "
                                      "CA (PEM).")
    tokens_file: str = setting("", flag="--tokens", env="C4_RELAY_TOKENS_FILE",
                               help="Token file, one `TOKEN ROLE` per line: the sidecars' "
                                    "tokens (role ingest). None: no token checks.")
    insecure: bool = setting(False, flag="--insecure", env="C4_INSECURE",
                             help="Allow plaintext gRPC on a non-loopback address.")

    def __post_init__(self) -> None:
        validate(self, ConfigError)
        for flag, address in (("--listen", self.listen), ("--daemon", self.daemon)):
            if ":" not in address:
                raise ConfigError(f"{flag} address {address!r} needs HOST:PORT")
        if self.max_streams >= self.workers:
            raise ConfigError(f"--max-streams ({self.max_streams}) must be below --workers "
                              f"({self.workers}): health checks need a thread too")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("TLS needs both --tls-cert and --tls-key")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key too")
