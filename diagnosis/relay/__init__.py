"""``c4 relay``: the tier between many sidecars and one daemon.

Every sidecar holds one ingest stream, and a daemon serves a few hundred at once (a thread
each). A relay per rack or row takes its nodes' streams and carries them to the daemon over a
few streams of its own: requests go up unchanged (each keeps its sidecar's identity, so the
daemon still acknowledges and recognises resends per sidecar), acknowledgements come back to the
stream of the sidecar named in them, and the daemon's control messages (sampling schedules,
joined communicators, detail and inspection requests) reach the sidecars they are meant for.

The relay keeps nothing it has not been acknowledged for: a request is the sidecar's until the
daemon's acknowledgement reaches it, and when a stream to the daemon breaks, the sidecar streams
it carried are ended so that their sidecars resend, in order, what is unacknowledged.
"""
