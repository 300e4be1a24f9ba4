"""The fault lab: a leaf/spine fabric of network namespaces on one machine, with c4's daemon
and sidecars, real torchrun jobs across its hosts, and faults injected on its links and ranks."""
