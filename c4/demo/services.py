"""c4's own services started as local subprocesses (a daemon, a node sidecar), each waited on
until it answers: for the demo, benchmarks and tests. Above the parts, since a daemon is ready
when its client gets a status back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from c4.processes import Service, c4_command, wait_for


def start_daemon(workdir: Path, port: int, store: str | None = None, name: str = "daemon",
                 extra: Sequence[str] = ()) -> Service:
    from diagnosis.client import DaemonClient

    store = store or f"sqlite:///{workdir / 'c4.db'}"
    svc = Service(c4_command("daemon", "--listen", f"127.0.0.1:{port}", "--store", store,
                             *extra), workdir / f"{name}.log").start()
    client = DaemonClient(f"127.0.0.1:{port}", timeout=2.0)
    try:
        wait_for(client.status, 60, what=f"the daemon on port {port}")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{svc.output()[-2000:]}") from None
    finally:
        client.close()
    return svc


def start_sidecar(workdir: Path, port: int, host: str, name: str | None = None,
                  extra: Sequence[str] = ()) -> tuple[Service, Path]:
    name = name or f"sidecar-{host}"
    sock = workdir / f"{name}.sock"
    svc = Service(c4_command("sidecar", "--daemon", f"127.0.0.1:{port}", "--socket", str(sock),
                             "--host", host, "--spill-dir", str(workdir / f"{name}-spill"),
                             *extra),
                  workdir / f"{name}.log").start()
    wait_for(sock.exists, 60, what=f"the sidecar socket {sock}")
    return svc, sock
