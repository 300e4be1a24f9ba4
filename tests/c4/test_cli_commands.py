"""``c4 NAME`` imports NAME's module alone: the table of commands says which module registers
each, and it must name exactly what the modules register (a real subprocess checks what one
command imports)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import typer

from c4.cli import COMMANDS, _command

REPO = Path(__file__).resolve().parents[2]


def _registered(module: str) -> set[str]:
    app = typer.Typer()
    importlib.import_module(module).register(app)
    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    return names | {g.name for g in app.registered_groups}


def test_the_table_names_what_each_module_registers():
    for module, names in COMMANDS.items():
        assert _registered(module) == set(names), module
    every = [n for names in COMMANDS.values() for n in names]
    assert len(every) == len(set(every))


def test_the_command_is_the_first_word_not_an_option():
    assert _command(["-v", "analyze", "t.jsonl", "--topology", "x"]) == "analyze"
    assert _command(["--verbose", "--verbose", "faults", "list"]) == "faults"
    assert _command(["--help"]) is None and _command([]) is None


def _modules_after(*args: str) -> tuple[int, set[str]]:
    code = ("import sys\nsys.argv = ['c4', *sys.argv[1:]]\nfrom c4.cli import main\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code or 0\n"
            "print(code, ' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, timeout=60,
                         check=True)
    code_, mods = out.stdout.strip().splitlines()[-1].split(" ", 1)
    return int(code_), set(mods.split())


def test_one_command_imports_its_module_alone_and_help_lists_every_command():
    code, mods = _modules_after("analyze", "--help")
    assert code == 0 and "diagnosis.analyze.cli" in mods
    assert not mods & (set(COMMANDS) - {"diagnosis.analyze.cli"})
    out = subprocess.run([sys.executable, "-m", "c4", "--help"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
                         cwd=REPO, timeout=60, check=True)
    listed = {ln.split()[1] for ln in out.stdout.splitlines()
              if ln.startswith("│ ") and len(ln.split()) > 2}
    assert {n for names in COMMANDS.values() for n in names} <= listed
