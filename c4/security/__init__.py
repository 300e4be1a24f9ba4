"""Transport security and access control for the daemon's gRPC services.

``roles`` says which role may call which method, ``tokens`` reads the token file, ``server``
builds the daemon's credentials and its auth interceptor, ``channel`` gives clients (the CLI,
the sidecar, the recovery controller) a channel with TLS and a bearer token, and ``cli`` adds
the matching ``--tls-*``/``--token`` options to CLI commands."""
