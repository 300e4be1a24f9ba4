"""The per-node sidecar: gathers local ranks' records and ships them to the daemon, losing none."""
