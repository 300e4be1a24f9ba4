"""The demo's story: a real training job under c4 meets a slowdown and then a hang; c4 reports
both, isolates the hung host, and the job resumes from its last complete checkpoint on the
others. Shown live, ended with the recovery's timeline and the job's ETTR."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from c4.demo.envs import open_env
from c4.output import make_console
from c4.processes import REPO, Service, c4_command

TRAIN = REPO / "recovery" / "train_example.py"


@dataclass(frozen=True)
class DemoConfig:
    local: bool = False          # local processes even when the lab could run
    keep: bool = False           # keep logs, database and journal
    steady_s: float = 10.0       # healthy training before the first fault
    after_s: float = 10.0        # training after the restart before the demo ends
    phase_timeout_s: float = 150.0
    settle_s: float = 20.0       # how long a wrong first report may wait for a right one
    work: int = 20               # CPU work per step of the training script


class DemoFailed(RuntimeError):
    """A phase did not happen in time; the message says which and where the logs are."""


class Demo:
    def __init__(self, config: DemoConfig, console: Console) -> None:
        self.cfg = config
        self.console = console
        self.work = Path(tempfile.mkdtemp(prefix="c4-demo-"))
        self.job = f"demo-{int(time.time())}"
        self.journal_path = self.work / "recovery.db"
        self.services: list[Service] = []
        self.events: list[str] = []
        self.start = time.monotonic()
        self.env: Any = None
        self.live: Live | None = None

    # ----- what is going on -------------------------------------------------------------------
    def _progress(self) -> dict[str, Any]:
        files = sorted((self.work / "launch").glob(f"{self.job}-progress-*.jsonl"),
                       key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        for path in reversed(files):
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            steps = [x for x in lines if x.get("event") == "step"]
            if steps:
                return {"attempt": int(path.stem.rsplit("-", 1)[1]), **steps[-1]}
        return {}

    def _view(self) -> Group:
        from diagnosis.client import DaemonClient
        from recovery.journal import Journal

        elapsed = time.monotonic() - self.start
        prog = self._progress()
        head = (f"[bold]c4 demo[/bold] on {self.env.name}   {elapsed:5.0f} s   job {self.job}"
                + (f"   attempt {prog['attempt']}, step {prog.get('step')}, "
                   f"loss {prog.get('loss', float('nan')):.4f}" if prog else "   starting"))
        story = "\n".join(self.events[-6:])
        # a piped console is as wide as its longest line: filling it would write lines of
        # 100,000 columns, so the view is only as wide as what it shows there
        fill = self.console.is_terminal
        faults = Table(title="what c4 found (live fault reports)", expand=fill)
        for col in ("kind", "top suspects", "summary"):
            faults.add_column(col, overflow="fold")
        try:
            with DaemonClient(self.env.daemon, timeout=2) as client:
                for r in client.faults(self.job):
                    faults.add_row(r.kind, ", ".join(f"{s.type} {s.id} ({s.score:.2f})"
                                                     for s in r.suspects[:3]), r.summary)
        except Exception as exc:  # the view must not stop the demo
            faults.add_row("-", "-", f"daemon unreachable: {exc}")
        recs = Table(title="recovery (journal)", expand=fill)
        for col in ("node", "state", "reason"):
            recs.add_column(col, overflow="fold")
        if self.journal_path.exists():
            jr = Journal(self.journal_path)
            try:
                for rec in jr.recoveries(self.job):
                    recs.add_row(rec.node, rec.state.value, rec.reason)
                for d in jr.decisions(self.job, limit=3):
                    recs.add_row("-", f"decision: {d.action}", d.reason)
            finally:
                jr.close()
        return Group(Panel(head + ("\n" + story if story else ""), expand=fill), faults, recs)

    def say(self, text: str) -> None:
        stamp = time.monotonic() - self.start
        self.events.append(f"[{stamp:5.0f} s] {text}")
        if self.live is not None:
            self.live.update(self._view())

    def wait(self, what: str, cond: Callable[[], Any], timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout or self.cfg.phase_timeout_s)
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            launch = self.services[-1] if self.services else None
            if launch is not None and not launch.running() and what != "the job to end":
                raise DemoFailed(f"the job supervisor exited while waiting for {what}:\n"
                                 + launch.output()[-1500:])
            if self.live is not None:
                self.live.update(self._view())
            time.sleep(0.5)
        raise DemoFailed(f"timed out waiting for {what}; logs are in {self.work}")

    # ----- conditions -------------------------------------------------------------------------
    def _reports(self, kinds: tuple[str, ...]) -> list[Any]:
        from diagnosis.client import DaemonClient

        try:
            with DaemonClient(self.env.daemon, timeout=2) as client:
                return [r for r in client.faults(self.job) if r.kind in kinds]
        except Exception:
            return []

    def _naming(self, kinds: tuple[str, ...], accept: set[str]) -> Any:
        """A report of ``kinds`` whose top-scored suspects include one of ``accept``."""
        for r in self._reports(kinds):
            top = max((s.score for s in r.suspects), default=None)
            if any(s.id in accept for s in r.suspects if s.score == top):
                return r
        return None

    def _found(self, what: str, kinds: tuple[str, ...], culprit: str) -> Any:
        """Wait for c4 to report the planted fault and say whether it named the culprit; a
        first report naming something else gets ``settle_s`` to be joined by a right one."""
        accept = self.env.accepted(culprit)
        found = self.wait(f"c4 to report {what}", lambda: self._reports(kinds))
        right = self._naming(kinds, accept)
        if right is not None:
            self.say(f"c4 reported {right.kind}: {right.summary} (planted at {culprit}: it "
                     "names the planted component)")
            return right
        self.say(f"c4 reported {found[0].kind}: {found[0].summary} (planted at {culprit}: "
                 "[red]it does not name the planted component[/red])")
        deadline = time.monotonic() + self.cfg.settle_s
        while right is None and time.monotonic() < deadline:
            if self.live is not None:
                self.live.update(self._view())
            time.sleep(0.5)
            right = self._naming(kinds, accept)
        if right is not None:
            self.say(f"c4 then reported {right.kind}: {right.summary} (it names the planted "
                     "component)")
        return right or found[0]

    def _recovery(self, states: tuple[str, ...]) -> Any:
        from recovery.journal import Journal

        if not self.journal_path.exists():
            return None
        jr = Journal(self.journal_path)
        try:
            return next((r for r in jr.recoveries(self.job) if r.state.value in states), None)
        finally:
            jr.close()

    # ----- the story --------------------------------------------------------------------------
    def run(self) -> int:
        self.console.print(f"[bold]c4 demo[/bold]: setting up ({self.work})")
        self.env = open_env(self.work, local=self.cfg.local)
        env_vars = {"C4_RECOVERY_JOURNAL": str(self.journal_path),
                    "C4_BLOCKLIST": str(self.work / "blocklist.json")}
        self.services.append(Service(
            c4_command("recover", "--daemon", self.env.daemon,
                       # slowness is reported and shown; the hang is what gets a host isolated
                       "--kinds", "noncomm_hang,comm_hang,error", "--max-node-fraction", "0.5",
                       "--cooldown", "5", "--hang-grace", "10",
                       # the demo's daemon takes records from anyone on this machine
                       "--trust-unauthenticated-ingest"), self.work / "recover.log",
            env=env_vars).start())
        train_env = {**env_vars, "C4_TRAIN_STEPS": "100000", "C4_TRAIN_CKPT_EVERY": "10",
                     "C4_TRAIN_CKPT_DIR": str(self.work / "checkpoints"),
                     "C4_TRAIN_WORK": str(self.cfg.work), "C4_TRAIN_BATCH": "48",
                     **self.env.train_env()}
        self.services.append(Service(
            c4_command("launch", "--job", self.job, "--hosts", ",".join(self.env.hosts),
                       "--nproc-per-node", str(self.env.nproc), "--grace", "3",
                       "--workdir", str(self.work / "launch"), *self.env.launch_args(), "--",
                       str(TRAIN)), self.work / "launch.log", env=train_env).start())
        with Live(self._view(), console=self.console, refresh_per_second=2) as live:
            self.live = live
            self.say(f"job started: {len(self.env.hosts)} hosts x {self.env.nproc} gloo ranks, "
                     "checkpoint every 10 steps, collectors on")
            self.wait("the first training step", lambda: self._progress().get("step"), 240)
            time.sleep(self.cfg.steady_s)
            what, culprit = self.env.slow_fault()
            self.say(f"fault 1 planted: {what}")
            self._found("the slowdown", ("comm_slow", "noncomm_slow"), culprit)
            self.env.clear_faults()
            self.say("fault 1 cleared")
            victim = self.env.hosts[1]
            what, culprit = self.env.hang_fault(victim)
            self.say(f"fault 2 planted: {what}")
            self._found("the hang", ("noncomm_hang",), culprit)
            rec = self.wait("the recovery to isolate a host",
                            lambda: self._recovery(("isolated", "restarting", "stopped",
                                                    "relaunched", "resumed")))
            self.say(f"recovery isolated {rec.node}; the job is being restarted without it")
            self.env.end_hang()
            self.wait("the job to resume", lambda: self._recovery(("resumed",)), 240)
            prog = self._progress()
            self.say(f"resumed: attempt {prog.get('attempt')} at step {prog.get('step')}")
            time.sleep(self.cfg.after_s)
            self.say("stopping the job: the demo is over")
            self.services[-1].stop(timeout=30)
            live.update(self._view())
        self.live = None
        self.console.print("\n".join(self.events))
        self._summary()
        return 0

    def _summary(self) -> None:
        out = subprocess.run(c4_command("recoveries", "--journal", str(self.journal_path),
                                        "--job", self.job),
                             capture_output=True, text=True, timeout=60)
        self.console.print(out.stdout or out.stderr)
        self.console.print(f"Fault reports: `c4 faults list --daemon {self.env.daemon}` while "
                           "the demo runs; with --keep the database and journal stay in "
                           f"{self.work}.")

    def close(self, keep: bool = False) -> None:
        for svc in reversed(self.services):
            svc.stop(timeout=20)
        if self.env is not None:
            self.env.close()
        if self.cfg.keep or keep:
            self.console.print(f"logs, database and journal kept in {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def run_demo(config: DemoConfig, console: Console | None = None) -> int:
    console = console or make_console()
    demo = Demo(config, console)
    failed = True
    try:
        code = demo.run()
        failed = False
        return code
    except DemoFailed as exc:
        demo.live = None
        console.print("\n".join(demo.events))
        console.print(f"[red]demo failed:[/red] {exc}")
        return 1
    finally:
        demo.close(keep=failed)  # the logs of a failed run are what explains it
