"""``c4 demo``: the whole loop on this machine with real processes."""
