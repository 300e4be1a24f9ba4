"""Every command that prints data takes --format table|json|jsonl with one shape: an object
naming what it holds, or one object per line; numbers as numbers."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from c4.cli import build_app
from c4.output import Format
from recovery.isolation.blocklist import BlocklistIsolator


def run(*args: str) -> str:
    res = CliRunner().invoke(build_app(), list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_topology_show_formats(tmp_path):
    topo = tmp_path / "topo.json"
    run("topology", "gen", "rail", "--hosts", "4", "-o", str(topo))
    doc = json.loads(run("topology", "show", str(topo), "--format", "json"))
    counts = {r["what"]: r["count"] for r in doc["summary"] if r["what"] in ("hosts", "gpus")}
    assert counts == {"hosts": 4, "gpus": 32} and isinstance(doc["paths"], str)
    lines = [json.loads(x) for x in run("topology", "show", str(topo), "--format",
                                        "jsonl").splitlines()]
    assert lines == doc["summary"]
    assert "Gbit/s" in run("topology", "show", str(topo))


def test_nodes_list_formats(tmp_path):
    path = tmp_path / "blocklist.json"
    BlocklistIsolator(path).isolate("node7", "noncomm_hang: rank 3")
    spec = f"blocklist:{path}"
    doc = json.loads(run("nodes", "list", "--isolator", spec, "--format", "json"))
    assert doc == {"nodes": [{"node": "node7", "reason": "noncomm_hang: rank 3"}]}
    line = run("nodes", "list", "--isolator", spec, "--format", "jsonl").strip()
    assert json.loads(line) == doc["nodes"][0]


# Commands that print no data of their own (they run a service, write files named by -o, or
# follow a job), each with why; any other command must take --format.
NO_FORMAT = {
    "demo": "a story told to a person",
    "sidecar": "a service", "daemon": "a service", "relay": "a service",
    "run": "runs the job",
    "report": "writes the HTML page named by --html",
    "sim": "writes its run into --out",
    "recover": "a service (its decisions: c4 recoveries --format)",
    "launch": "runs the job",
    "lab up": "sets the lab up", "lab down": "tears it down",
    "lab truth": "the lab's ground truth, always JSON for the scorers",
    "lab inject": "acts", "lab clear": "acts", "lab run": "runs a job",
    "lab plan-apply": "acts", "lab plan-clear": "acts",
    "health records": "writes health records in the trace format",
    "faults ack": "acts", "faults close": "acts", "jobs rm": "acts",
    "topology gen": "writes the topology named by -o",
    "topology discover": "always JSON (the input of topology import host)",
    "nodes release": "acts", "nodes isolate": "acts",
    "flows job": "writes a flows file", "flows observed": "writes a flows file",
}
def _commands():
    import typer.main

    root = typer.main.get_command(build_app())

    def walk(cmd, path):
        opts = [p for p in cmd.params if p.param_type_name == "option"]
        if getattr(cmd, "commands", None):
            if getattr(cmd, "invoke_without_command", False):
                yield " ".join(path), opts
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), opts

    yield from walk(root, [])


def test_every_command_that_prints_data_takes_the_three_formats():
    seen = set()
    for name, opts in _commands():
        seen.add(name)
        fmt = next((p for p in opts if "--format" in p.opts), None)
        if name in NO_FORMAT or not name:
            continue
        assert fmt is not None, f"c4 {name} prints data but takes no --format"
        # the one Format of c4.output: table, json and jsonl, spelt the same everywhere
        assert fmt.type_descriptor.annotation is Format, f"c4 {name} --format: its own values"
        assert fmt.default is Format.table, f"c4 {name} --format defaults to {fmt.default}"
    assert not set(NO_FORMAT) - seen, f"no such commands: {set(NO_FORMAT) - seen}"


def test_short_flags_mean_one_thing_everywhere():
    meaning: dict[str, set[str]] = {}
    for _name, opts in _commands():
        for p in opts:
            longs = [o for o in p.opts if o.startswith("--")]
            for short in (o for o in p.opts if not o.startswith("--")):
                meaning.setdefault(short, set()).update(longs)
    assert meaning.get("-f") == {"--format"}
    # -o is where to write everywhere: a file, or for c4 sim the directory --out
    assert {k: v for k, v in meaning.items() if len(v) > 1} == {"-o": {"--out", "--output"}}


def test_help_speaks_to_users_not_to_the_project():
    import typer.main

    def texts(cmd):
        yield cmd.help or ""
        for p in cmd.params:
            yield getattr(p, "help", None) or ""
        for sub in getattr(cmd, "commands", {}).values():
            yield from texts(sub)

    for text in texts(typer.main.get_command(build_app())):
        assert not re.search(r"shared spec|\bsection \d", text), text


def test_one_object_commands_print_it_on_one_line_as_jsonl(tmp_path):
    topo = tmp_path / "topo.json"
    run("topology", "gen", "rail", "--hosts", "2", "-o", str(topo))
    doc = json.loads(run("topology", "check", str(topo), "--format", "json"))
    line = run("topology", "check", str(topo), "--format", "jsonl")
    assert len(line.strip().splitlines()) == 1 and json.loads(line) == doc
    res = CliRunner().invoke(build_app(), ["topology", "check", str(topo), "--format", "text"])
    assert res.exit_code == 2 and "table" in res.output and "jsonl" in res.output
