"""The Grafana dashboard is valid JSON and every metric it queries is served on the /metrics of
a real daemon or sidecar after a short real job: `c4 run` of two gloo ranks through the real
hook and sidecar, one of them stopped with SIGSTOP so that a fault is open. The per-job series
(step time, call times) and the open-fault gauge carry the job, kind and host they should."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from c4.processes import Service, c4_command
from collectors.sidecar.config import SidecarConfig
from collectors.sidecar.sidecar import Sidecar
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.services import wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.network, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "deploy" / "grafana" / "c4.json"
GUIDE = REPO / "deploy" / "grafana" / "README.md"
SCRIPT = REPO / "tests" / "support" / "steady_job.py"
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")
RATE = 20.0     # steps per second of the job: each an all_reduce on the world and on a pair


def _expressions(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [e for v in node.values() for e in _expressions(v)]
    if isinstance(node, list):
        return [e for v in node for e in _expressions(v)]
    return []


def _alert_rules() -> list[dict]:
    """The alert rules the dashboard's README gives, from its YAML blocks."""
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), flags=re.S)
    docs = [yaml.safe_load(b) for b in blocks if "alert:" in b]
    return [r for d in docs for g in d["groups"] for r in g["rules"]]


def test_alert_rules_cover_every_kind_and_name_commands_c4_has():
    import typer.main

    from c4.cli import build_app
    from c4.report import KINDS

    rules = _alert_rules()
    assert {r["alert"] for r in rules} >= {"C4TrainingJobHang"}
    covered: set[str] = set()
    for rule in rules:
        assert "c4_open_faults" in rule["expr"] and rule["labels"]["severity"], rule
        kinds = set(re.search(r'kind=~"([^"]+)"', rule["expr"]).group(1).split("|"))
        assert kinds <= set(KINDS), f"{rule['alert']}: kinds c4 does not file: {kinds}"
        covered |= kinds
        for label in re.findall(r"\$labels\.(\w+)", json.dumps(rule["annotations"])):
            assert label in ("job", "kind", "host"), label
    assert covered == set(KINDS), f"no rule for {set(KINDS) - covered}"
    # the commands the pages point to exist, with the options they use
    root = typer.main.get_command(build_app())
    text = " ".join(r["annotations"]["description"] for r in rules)
    for words in re.findall(r"`c4 ([^`]+)`", text):
        cmd, args = root, words.split()
        while args and getattr(cmd, "commands", None) and args[0] in cmd.commands:
            cmd = cmd.commands[args.pop(0)]
        assert not getattr(cmd, "commands", None), f"c4 {words}: not a command"
        options = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert {a for a in args if a.startswith("-")} <= options, f"c4 {words}"


def _scrape(port: int) -> tuple[set[str], dict[tuple[str, tuple], float]]:
    """The names the endpoint declares (a labelled family with no sample yet still has its
    HELP and TYPE lines), and every sample as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    families = list(text_string_to_metric_families(text))
    names = {f.name + s for f in families for s in SUFFIXES}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families for s in f.samples}
    return names, samples


def _with(samples: dict, name: str, **labels: str) -> dict[tuple, float]:
    return {k: v for k, v in samples.items()
            if k[0] == name and set(labels.items()) <= set(k[1])}


def test_dashboard_is_well_formed():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p.get("targets") for p in panels), "every panel queries something"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for expr in _expressions(dashboard):
        for var in re.findall(r"\$(\w+)", expr):
            assert var in variables, f"{expr} uses ${var}, which the dashboard does not define"


def test_dashboard_metrics_exist_after_a_real_job(tmp_path):
    exprs = _expressions(json.loads(DASHBOARD.read_text()))
    exprs += [r["expr"] for r in _alert_rules()]
    referenced = {name for e in exprs for name in re.findall(r"\bc4_[a-z0-9_]+", e)}
    # the headline signals are on it
    for name in ("c4_daemon_ingest_records_total", "c4_daemon_ack_latency_seconds_bucket",
                 "c4_daemon_store_write_seconds_bucket", "c4_daemon_writer_queue_depth",
                 "c4_daemon_open_faults", "c4_open_faults", "c4_job_step_seconds",
                 "c4_job_collective_seconds_bucket", "c4_sidecar_spill_bytes",
                 "c4_sidecar_unacked_requests", "c4_sidecar_dropped_requests_total"):
        assert name in referenced, name

    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store=f"sqlite:///{tmp_path}/c4.db",
                            metrics_listen="127.0.0.1:0", analyze_interval_s=0.5))
    d.start()
    car = Sidecar(SidecarConfig(daemon=f"127.0.0.1:{d.port}", socket_path=tmp_path / "s.sock",
                                host="node0", spill_dir=tmp_path / "spill",
                                flush_interval_s=0.1, metrics_listen="127.0.0.1:0"))
    car.start()
    env = {"C4_TEST_LOG": str(tmp_path / "pids"), "C4_TEST_RATE": str(RATE),
           "C4_TEST_SECONDS": "120", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    job = Service([*c4_command("run", "--job", "dash", "--sidecar-socket",
                               str(tmp_path / "s.sock"), "--"),
                   sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", "2", str(SCRIPT)], tmp_path / "job.log", env=env).start()
    port = d.metrics_server.port
    try:
        step = wait_for(lambda: _with(_scrape(port)[1], "c4_job_step_seconds", job="dash"), 90,
                        what="a step time for the job")
        # two calls a step at RATE steps a second: the step, not the time between calls
        assert next(iter(step.values())) == pytest.approx(1 / RATE, rel=0.4), step
        calls = _with(_scrape(port)[1], "c4_job_collective_seconds_count", job="dash",
                      kind="collective")
        assert next(iter(calls.values())) > 0

        os.kill(int((tmp_path / "pids" / "rank1.pid").read_text()), signal.SIGSTOP)
        opened = wait_for(lambda: _with(_scrape(port)[1], "c4_open_faults", job="dash"), 60,
                          what="an open fault of the job on /metrics")
        rank_host = {r.rank: r.host for r in d.store.ranks("dash")}
        (_name, labels), count = next(iter(opened.items()))
        labels = dict(labels)
        assert count == 1 and labels["host"] == rank_host[1], (labels, rank_host)
        assert labels["kind"] in ("noncomm_hang", "comm_hang", "error"), labels
        names, samples = _scrape(port)
        assert samples[("c4_daemon_open_faults", ())] >= 1
        sidecar_names, _ = _scrape(car.metrics_server.port)
    finally:
        job.kill()
        for f in (tmp_path / "pids").glob("rank*.pid"):   # torchrun's workers, by pid
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(f.read_text()), signal.SIGKILL)
        car.stop(timeout=5)
        d.stop(grace=1)
    missing = sorted(referenced - names - sidecar_names)
    assert not missing, f"the dashboard uses metrics nobody exports: {missing}"
