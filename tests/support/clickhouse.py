"""A real clickhouse-server for tests: private directory, free ports, 127.0.0.1 only.

Use the fixtures from a test module (fixtures must be visible in the module's namespace)::

    from tests.support.clickhouse import clickhouse_server, clickhouse_url  # noqa: F401

``clickhouse_server`` (session) is the running server; ``clickhouse_url`` (function) is a store
URL naming a database of its own, so tests sharing the server do not see each other's rows.
Without the binary both skip, saying how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from c4.processes import free_port

CONFIG_DIR = Path("/etc/clickhouse-server")
START_TIMEOUT_S = 60.0  # two shared cores: a cold start can take far longer than the usual 4 s
INSTALL_HINT = ("clickhouse-server is not installed: `make test` installs it when run as root "
                "(scripts/system-deps.sh installs clickhouse-server)")


def find_binary() -> list[str] | None:
    """The command that starts a server, or None when none is installed."""
    for cand in (shutil.which("clickhouse-server"), "/usr/sbin/clickhouse-server"):
        if cand and os.access(cand, os.X_OK):
            return [cand]
    for cand in (shutil.which("clickhouse"), "/usr/bin/clickhouse"):
        if cand and os.access(cand, os.X_OK):
            return [cand, "server"]
    return None


def _set(root: ET.Element, tag: str, value: str) -> None:
    el = root.find(tag)
    if el is None:
        el = ET.SubElement(root, tag)
    el.text = value


def write_config(root_dir: Path, tcp_port: int, http_port: int) -> Path:
    """Copy the packaged config with every path under ``root_dir`` and our ports."""
    tree = ET.parse(CONFIG_DIR / "config.xml")
    cfg = tree.getroot()
    for tag in ("listen_host", "interserver_http_port", "https_port", "tcp_port_secure",
                "mysql_port", "postgresql_port", "query_log", "query_thread_log", "trace_log",
                "part_log", "metric_log", "text_log", "remote_servers", "graphite",
                "distributed_ddl"):
        for el in cfg.findall(tag):
            cfg.remove(el)
    _set(cfg, "listen_host", "127.0.0.1")
    _set(cfg, "tcp_port", str(tcp_port))
    _set(cfg, "http_port", str(http_port))
    for tag, sub in (("path", "data/"), ("tmp_path", "tmp/"), ("user_files_path", "user_files/"),
                     ("format_schema_path", "format_schemas/")):
        _set(cfg, tag, f"{root_dir / sub}/".replace("//", "/"))
    logger = cfg.find("logger")
    if logger is not None:
        _set(logger, "log", str(root_dir / "log" / "clickhouse-server.log"))
        _set(logger, "errorlog", str(root_dir / "log" / "clickhouse-server.err.log"))
    # the caches are allocated on demand, but keep a test server small anyway
    _set(cfg, "mark_cache_size", str(256 << 20))
    _set(cfg, "uncompressed_cache_size", str(256 << 20))
    shutil.copy(CONFIG_DIR / "users.xml", root_dir / "users.xml")
    _set(cfg, "users_config", str(root_dir / "users.xml"))
    for sub in ("data", "tmp", "user_files", "format_schemas", "log"):
        (root_dir / sub).mkdir(parents=True, exist_ok=True)
    out = root_dir / "config.xml"
    tree.write(out, encoding="utf-8", xml_declaration=True)
    return out


class ClickHouseServer:
    """A clickhouse-server process owning ``root_dir``; ``stop()`` then ``start()`` restarts
    it on the same ports and data."""

    def __init__(self, root_dir: Path, command: list[str]) -> None:
        self.root_dir = root_dir
        self.command = command
        self.tcp_port = free_port()
        self.http_port = free_port()
        self.config = write_config(root_dir, self.tcp_port, self.http_port)
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, database: str = "c4") -> str:
        return f"clickhouse://default@127.0.0.1:{self.tcp_port}/{database}"

    def start(self, timeout: float = START_TIMEOUT_S, port_tries: int = 3) -> None:
        """Start and wait until it answers; a port taken meanwhile is swapped for a free one
        everywhere the config names it (a cluster's replicas name the server's own port)."""
        for tries_left in range(port_tries - 1, -1, -1):
            try:
                self._start_once(timeout)
                return
            except RuntimeError as exc:
                if not tries_left or "Address already in use" not in str(exc):
                    raise
            self._move_ports()

    def _move_ports(self) -> None:
        moves = {str(self.tcp_port): str(free_port()), str(self.http_port): str(free_port())}
        tree = ET.parse(self.config)
        for el in tree.getroot().iter():
            if el.text is not None and el.text.strip() in moves:
                el.text = moves[el.text.strip()]
        tree.write(self.config, encoding="utf-8", xml_declaration=True)
        self.tcp_port = int(moves[str(self.tcp_port)])
        self.http_port = int(moves[str(self.http_port)])

    def _start_once(self, timeout: float) -> None:
        with open(self.root_dir / "log" / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                [*self.command, f"--config-file={self.config}"], cwd=self.root_dir,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"clickhouse-server exited with {self.proc.returncode}:\n"
                                   + self.log_tail())
            if self.answers():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"clickhouse-server did not answer within {timeout:.0f} s:\n"
                           + self.log_tail())

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/ping",
                                        timeout=1) as resp:
                return resp.read().startswith(b"Ok")
        except OSError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        """Shut down (SIGTERM, then SIGKILL after 20 s), or crash at once with ``kill``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if kill:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        text = []
        for name in ("stdout.log", "clickhouse-server.err.log"):
            p = self.root_dir / "log" / name
            if p.exists():
                text += p.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(text)


def running_clickhouse() -> Iterator[ClickHouseServer]:
    """Start a server in a fresh temporary directory; stop it and delete everything after."""
    command = find_binary()
    if command is None:
        pytest.skip(INSTALL_HINT)
    root = Path(tempfile.mkdtemp(prefix="c4-clickhouse-"))
    try:
        server = ClickHouseServer(root, command)
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def clickhouse_server() -> Iterator[ClickHouseServer]:
    yield from running_clickhouse()


@pytest.fixture
def clickhouse_url(clickhouse_server: ClickHouseServer) -> str:
    return clickhouse_server.url(f"c4_test_{uuid.uuid4().hex[:12]}")
