"""Slurm backend: drain the node with a reason (running jobs keep it until they end, nothing new
lands on it), requeue the job with the node excluded. Talks to Slurm through ``scontrol`` and
``squeue``; point ``SLURM_CONF`` at the cluster's configuration when it is not the default."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from recovery.errors import IsolationError
from recovery.isolation.api import REASON_PREFIX, Isolator

Runner = Callable[[Sequence[str]], str]

_NODE = re.compile(r"NodeName=(\S+)")
_STATE = re.compile(r"\bState=(\S+)")
_REASON = re.compile(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$")


def _run_cmd(env: Mapping[str, str] | None) -> Runner:
    def run(args: Sequence[str]) -> str:
        try:
            out = subprocess.run(list(args), capture_output=True, text=True, timeout=30,
                                 env={**os.environ, **(env or {})})
        except FileNotFoundError:
            raise IsolationError(f"{args[0]} is not installed; install slurm-client or use "
                                 "another isolator") from None
        except subprocess.TimeoutExpired:
            raise IsolationError(f"`{' '.join(args)}` took over 30 s; is slurmctld up?") from None
        if out.returncode != 0:
            raise IsolationError(f"`{' '.join(args)}` failed: {out.stderr.strip() or out.stdout}")
        return out.stdout
    return run


class SlurmIsolator(Isolator):
    name = "slurm"

    def __init__(self, *, env: Mapping[str, str] | None = None,
                 runner: Runner | None = None) -> None:
        self._run = runner or _run_cmd(env)

    def isolate(self, node: str, reason: str) -> None:
        if node in self.isolated():
            return
        text = f"{REASON_PREFIX} {reason}"[:200].replace("\n", " ")
        self._run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}"])

    def release(self, node: str) -> None:
        if node in self.isolated():
            self._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def isolated(self) -> Mapping[str, str]:
        """Drained or draining nodes (by anyone), with Slurm's reason."""
        out: dict[str, str] = {}
        for line in self._run(["scontrol", "show", "node", "--oneliner"]).splitlines():
            name, state = _NODE.search(line), _STATE.search(line)
            if name and state and ("DRAIN" in state.group(1) or "DOWN" in state.group(1)):
                reason = _REASON.search(line)
                out[name.group(1)] = reason.group(1) if reason else ""
        return out

    def job_id(self, job: str) -> str:
        """A Slurm job id from c4's job name: the id itself, or the job's Slurm name."""
        if job.isdigit():
            return job
        ids = self._run(["squeue", "-h", "-n", job, "-o", "%i"]).split()
        if len(ids) != 1:
            raise IsolationError(f"squeue finds {len(ids)} Slurm jobs named {job!r}; name the "
                                 "c4 job after its Slurm job id or a unique Slurm job name")
        return ids[0]

    def _wait_pending(self, jid: str, timeout_s: float = 60.0) -> None:
        """A requeued job first completes (its processes are killed); settings made before
        it is pending again may be overwritten by the requeue."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self._run(["squeue", "-h", "-j", jid, "-o", "%T"]).strip()
            if state == "PENDING":
                return
            time.sleep(0.2)
        raise IsolationError(f"slurm job {jid} was requeued but is not pending after "
                             f"{timeout_s:.0f} s; check `scontrol show job {jid}`")

    def restart(self, job: str, exclude: Collection[str]) -> str:
        jid = self.job_id(job)
        self._run(["scontrol", "requeue", jid])
        self._wait_pending(jid)
        if exclude:
            # once requeued the job is pending again, and a pending job takes a new exclusion
            self._run(["scontrol", "update", f"JobId={jid}",
                       f"ExcNodeList={','.join(sorted(exclude))}"])
        # a requeued job is held back for a while (about two minutes here) before it may
        # start again; the nodes it needs are free now
        self._run(["scontrol", "update", f"JobId={jid}", "StartTime=now"])
        return f"slurm job {jid} requeued excluding {', '.join(sorted(exclude)) or 'nothing'}"
