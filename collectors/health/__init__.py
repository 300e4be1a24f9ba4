"""Node health: parsers for what GPUs, the kernel, NICs and the host say about themselves
(nvidia-smi text/XML/CSV, DCGM, kernel log lines, InfiniBand counters, PSI, CPU steal), read
the same on the node (the sidecar) and offline (recorded files), into plain records."""
