"""What the deploy tests check files against: the real c4 commands' options and environment
variables (from the typer app itself, so a renamed option breaks the test, not a deployment),
and small parsers for systemd units and env files."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import typer.main

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
# read by the root command for every subcommand (c4/cli.py)
ROOT_ENVVARS = frozenset({"C4_LOG_LEVEL"})


@dataclass(frozen=True)
class CommandSpec:
    name: str
    options: frozenset[str]   # every spelling, e.g. --listen
    envvars: frozenset[str]


@cache
def command(name: str) -> CommandSpec:
    from c4.cli import build_app

    group = typer.main.get_command(build_app())
    cmd = group.commands.get(name)  # type: ignore[attr-defined]
    assert cmd is not None, f"c4 has no command {name!r}"
    options: set[str] = set()
    envvars: set[str] = set()
    for param in cmd.params:
        if param.param_type_name == "option":
            options.update(param.opts + param.secondary_opts)
        env = getattr(param, "envvar", None)
        if isinstance(env, str):
            envvars.add(env)
        elif env:
            envvars.update(env)
    return CommandSpec(name, frozenset(options), frozenset(envvars))


def check_c4_argv(argv: list[str]) -> CommandSpec:
    """``argv`` is ``[.../c4, COMMAND, --opt, value, ...]``; every option must be real."""
    assert Path(argv[0]).name == "c4", f"{argv}: not the c4 command"
    spec = command(argv[1])
    for arg in argv[2:]:
        if arg == "--":
            break
        if arg.startswith("-"):
            opt = arg.split("=", 1)[0]
            assert opt in spec.options, f"c4 {spec.name} has no option {opt} ({argv})"
    return spec


def read_env_file(path: Path, *, commented: bool = False) -> dict[str, str]:
    """KEY=VALUE lines (systemd EnvironmentFile / shell syntax without expansions); with
    ``commented``, also the ``#KEY=VALUE`` lines that document optional settings."""
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if commented and re.match(r"#[A-Z_][A-Z0-9_]*=", line):
            line = line[1:]
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)", line)
        assert m, f"{path.name}:{n}: not KEY=VALUE: {line!r}"
        value = m.group(2)
        out[m.group(1)] = shlex.split(value)[0] if value.strip() else ""
    return out


def read_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit as section -> [(key, value)], keeping repeated keys in order (which
    configparser cannot)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"{path.name}:{n}: setting before any section"
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key.strip()), \
            f"{path.name}:{n}: not Key=value: {raw!r}"
        current.append((key.strip(), value.strip()))
    return sections


def values(section: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in section if k == key]


def one(section: list[tuple[str, str]], key: str) -> str:
    vals = values(section, key)
    assert len(vals) == 1, f"expected exactly one {key}=, found {vals}"
    return vals[0]
