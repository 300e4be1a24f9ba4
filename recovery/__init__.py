"""Recovery: isolate the component a fault report names and restart the job without it, from
its last complete checkpoint.

- ``controller``: follows the daemon's live fault stream, applies the ``policy``, drives each
  recovery through the state machine in ``states`` and records everything in the ``journal``.
- ``isolation``: one contract (``isolation.api``) with blocklist, Slurm and Kubernetes backends.
- ``supervisor``: ``c4 launch``, which runs the job, stops it and relaunches it on healthy hosts.
- ``checkpoint``: the helper training scripts call (imports torch; nothing else here does).
"""
