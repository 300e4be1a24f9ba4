"""NCCL's own telemetry, read into c4's records: the Inspector's JSON lines and Prometheus
files, ``ncclras`` status reports and monitor events, the example profiler's Chrome trace,
CoMMA's latency records, and job logs (``NCCL_DEBUG`` lines, PyTorch's watchdog).

One module per source; :mod:`diagnosis.nccl.job` reconciles what they say about processes and
communicators, :mod:`diagnosis.nccl.seqmap` turns NCCL's per-type counters into c4's
per-communicator sequence numbers. See README.md in this directory.
"""
