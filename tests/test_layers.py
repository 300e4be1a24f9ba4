"""The import graph runs one way: shared layer <- parts <- top. A new upward import fails here.

Every module's imports are read with ``ast`` (lazy ones inside functions and ``TYPE_CHECKING``
ones included: they are dependencies all the same) and mapped to the layer unit they belong to:

- ``shared``: the ``c4`` package except its top (the topology model, the fault report types,
  transport security, the metrics endpoint, the error root, the wire messages ``c4.proto``,
  the reduction rule, process helpers);
- the parts: ``diagnosis``, ``traffic_planner``, ``collectors``, ``recovery``;
- ``top``: the command line, the lab and the demo (``c4.cli``, ``c4.lab``, ``c4.demo``).
"""

from __future__ import annotations

import ast
import functools
import itertools
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("c4", "collectors", "diagnosis", "traffic_planner", "recovery")
TOP = ("c4.cli", "c4.lab", "c4.demo", "c4.__main__")

#: which units each unit may import (besides itself); the order of the parts is the order in
#: which data flows: the collectors use diagnosis' readers of NCCL's outputs on the node, and
#: recovery acts on what diagnosis and the collectors report
ALLOWED: dict[str, frozenset[str]] = {
    "shared": frozenset(),
    "diagnosis": frozenset({"shared"}),
    "traffic_planner": frozenset({"shared"}),
    "collectors": frozenset({"shared", "diagnosis"}),
    "recovery": frozenset({"shared", "diagnosis", "collectors"}),
    "top": frozenset({"shared", "diagnosis", "traffic_planner", "collectors", "recovery"}),
}


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.importer} imports {self.target}"


def unit_of(module: str) -> str | None:
    """The layer unit of a c4 module, or None for a module outside c4's packages."""
    top = module.split(".")[0]
    if top not in PACKAGES:
        return None
    if top != "c4":
        return top
    return "top" if any(module == t or module.startswith(t + ".") for t in TOP) else "shared"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """Every import in ``path`` of a c4 module; ``from pkg import sub`` counts as ``pkg.sub``
    when ``sub`` is a module, since that is what it loads."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin
                       for a in node.names]
        else:
            continue
        out += [Import(name, t, path, node.lineno) for t in targets if unit_of(t) is not None]
    return out


@functools.cache
def import_graph() -> tuple[Import, ...]:
    known = modules()
    assert len(known) > 100, f"found only {len(known)} modules under {ROOT}: is ROOT right?"
    return tuple(imp for name, path in known.items() for imp in imports_of(name, path, known))


def test_every_import_runs_down_the_layers() -> None:
    upward = []
    for imp in import_graph():
        src, dst = unit_of(imp.importer), unit_of(imp.target)
        if src != dst and dst not in ALLOWED[src]:
            may = (f"{src} may import only {', '.join(sorted(ALLOWED[src]))}" if ALLOWED[src]
                   else f"{src} imports none of c4's other packages")
            upward.append(f"{imp}\n    ({may}: move what both need down into the shared "
                          "layer (the c4 package), or have the layer above pass it in)")
    assert not upward, "imports against the layers (tests/test_layers.py):\n" + "\n".join(upward)


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph ``edges``, as its nodes in order, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_units_import_each_other_without_a_cycle() -> None:
    edges: dict[str, set[str]] = {}
    witness: dict[tuple[str, str], Import] = {}
    for imp in import_graph():
        src, dst = unit_of(imp.importer), unit_of(imp.target)
        if src != dst:
            edges.setdefault(src, set()).add(dst)
            witness.setdefault((src, dst), imp)
    cycle = _cycle(edges)
    assert cycle is None, "import cycle between " + " -> ".join(cycle) + ":\n" + "\n".join(
        str(witness[a, b]) for a, b in itertools.pairwise(cycle))


def test_the_allowed_directions_themselves_have_no_cycle() -> None:
    assert _cycle({unit: set(deps) for unit, deps in ALLOWED.items()}) is None


def test_the_reader_sees_lazy_relative_and_submodule_imports(tmp_path: Path) -> None:
    """The checks above are only as good as the import reader; show it the forms c4 uses."""
    known = {"c4": ROOT / "c4/__init__.py", "c4.lab": ROOT / "c4/lab/__init__.py"}
    probe = tmp_path / "probe.py"
    probe.write_text("from c4 import lab, errors\n"
                     "def f():\n    from .client import DaemonClient\n"
                     "if True:\n    import recovery.journal\n"
                     "import numpy\n")
    got = sorted(imports_of("diagnosis.probe", probe, known), key=lambda i: i.line)
    assert [(i.target, i.line) for i in got] == [
        ("c4.lab", 1), ("c4", 1), ("diagnosis.client", 3), ("recovery.journal", 5)]
    assert [unit_of(i.target) for i in got] == ["top", "shared", "diagnosis", "recovery"]


def _strongly_connected(edges: dict[str, set[str]]) -> list[set[str]]:
    """The components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_import_cycle() -> None:
    """No two modules import each other, directly or round a loop, lazily or not: a module
    that needs another's types takes a protocol or the lower module both share."""
    known = modules()
    edges: dict[str, set[str]] = {}
    witness: dict[tuple[str, str], Import] = {}
    for imp in import_graph():
        # ``import a.b.c`` runs a.b.c; a package's own __init__ importing it is not a cycle
        if imp.target in known and imp.target != imp.importer:
            edges.setdefault(imp.importer, set()).add(imp.target)
            witness.setdefault((imp.importer, imp.target), imp)
    found = []
    for component in sorted(sorted(c) for c in _strongly_connected(edges)):
        inner = [str(witness[a, b]) for a in component for b in sorted(edges[a])
                 if b in component]
        found.append("  " + ", ".join(component) + ":\n" + "\n".join(
            "    " + line for line in inner))
    assert not found, ("modules that import each other (directly or round a loop); move what "
                       "both need into a lower module, or pass it in:\n" + "\n".join(found))
