"""The central diagnosis daemon: ingest over gRPC, store, live detection, fault stream."""
