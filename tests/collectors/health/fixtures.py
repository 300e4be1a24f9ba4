"""The recorded health sources (``shared/fixtures/health``): a path, or one section of an
nvidia_gpu_exporter capture file (sections open with a ``# <state> :: <what>`` banner)."""

from __future__ import annotations

from pathlib import Path

from tests.support.topology_fixtures import topo_fixture


def health(name: str) -> Path:
    return topo_fixture(name, "health")


def text(name: str) -> str:
    return health(name).read_text()


def capture_section(name: str, title: str) -> str:
    """The body of the section whose banner is ``# <title>`` (command line and rules dropped)."""
    lines = text(name).splitlines()
    start = lines.index(f"# {title}")
    body = []
    for line in lines[start + 1:]:
        if line.startswith("#" * 20):
            if body:
                break
            continue
        if line.startswith("# $ "):
            continue
        body.append(line)
    return "\n".join(body) + "\n"
