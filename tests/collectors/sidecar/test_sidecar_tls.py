"""A sidecar ships to a daemon that requires mutual TLS and tokens (real processes, real
certificates from a throwaway CA): with an ingest token its records arrive; with a token of
the wrong role nothing is stored and the daemon counts the refusals."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from c4.processes import Service, c4_command
from diagnosis.client import DaemonClient
from tests.support.frames import RankConnection, group_info, op_batch, rank_info
from tests.support.pki import make_pki
from tests.support.services import free_port, start_daemon, wait_for

pytestmark = [pytest.mark.network]

INGEST, READ = "ingest-" + "k" * 20, "read-" + "q" * 20


def _metric(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def _sidecar(tmp_path, port: int, host: str, token: str, pki, metrics_port: int
             ) -> tuple[Service, object]:
    sock = tmp_path / f"{host}.sock"
    token_file = tmp_path / f"{host}.token"   # not on the command line: ps would show it
    token_file.write_text(token)
    token_file.chmod(0o600)
    svc = Service(c4_command("sidecar", "--daemon", f"127.0.0.1:{port}", "--socket", str(sock),
                             "--host", host, "--spill-dir", str(tmp_path / f"{host}-spill"),
                             "--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert),
                             "--tls-key", str(pki.client_key), "--token-file", str(token_file),
                             "--metrics", f"127.0.0.1:{metrics_port}"),
                  tmp_path / f"{host}.log").start()
    wait_for(sock.exists, 60, what=f"the sidecar socket {sock}")
    # its metrics endpoint opens after the socket
    try:
        wait_for(lambda: _metric(metrics_port, "c4_sidecar_shipped_requests_total") >= 0, 30,
                 what=f"the metrics of sidecar {host}")
    except TimeoutError:
        raise AssertionError(f"sidecar {host} has no metrics endpoint:\n"
                             f"{svc.output()[-3000:]}") from None
    return svc, sock


def test_sidecar_ships_over_mutual_tls_with_an_ingest_token(tmp_path, monkeypatch):
    pki = make_pki(tmp_path / "pki")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{INGEST} ingest\n{READ} read\n")
    # this test's own client (and start_daemon's readiness check) reads with the read token
    monkeypatch.setenv("C4_TLS_CA", str(pki.ca))
    monkeypatch.setenv("C4_TLS_CERT", str(pki.client_cert))
    monkeypatch.setenv("C4_TLS_KEY", str(pki.client_key))
    monkeypatch.setenv("C4_TOKEN", READ)
    port, daemon_metrics = free_port(), free_port()
    daemon = start_daemon(tmp_path, port, extra=[
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca), "--tokens", str(tokens),
        "--metrics", str(daemon_metrics)])
    good_metrics, bad_metrics = free_port(), free_port()
    good, good_sock = _sidecar(tmp_path, port, "node0", INGEST, pki, good_metrics)
    bad, bad_sock = _sidecar(tmp_path, port, "node1", READ, pki, bad_metrics)
    try:
        rank = RankConnection(good_sock)
        rank.send(rank_info("secure", 0, 1, "node0"), group_info("secure", "0", [0]),
                  *(op_batch("secure", 0, range(i, i + 100)) for i in range(0, 1000, 100)))
        intruder = RankConnection(bad_sock)
        intruder.send(rank_info("intruder", 0, 1, "node1"), op_batch("intruder", 0, range(50)))
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: [(j.job, j.ops) for j in client.jobs()] == [("secure", 1000)], 30,
                     what="1,000 records over mutual TLS")
            wait_for(lambda: _metric(daemon_metrics, "c4_daemon_auth_denied_total",
                                     code="PERMISSION_DENIED") >= 1, 30,
                     what="the read-token sidecar refused")
            assert [j.job for j in client.jobs()] == ["secure"], "nothing from the intruder"
        wait_for(lambda: _metric(good_metrics, "c4_sidecar_shipped_requests_total") >= 3, 20,
                 what="the sidecar's shipped counter")
        assert _metric(bad_metrics, "c4_sidecar_shipped_requests_total") == 0
        assert _metric(bad_metrics, "c4_sidecar_unacked_requests") >= 1, "it keeps them"
        assert _metric(daemon_metrics, "c4_daemon_ingest_records_total") == 1000
        rank.close()
        intruder.close()
        assert good.stop() == 0
        assert bad.stop(timeout=20) == 0, "a refused sidecar still stops cleanly (spilling)"
        assert "PERMISSION_DENIED" in bad.output()
        assert list((tmp_path / "node1-spill").iterdir()), "the refused requests stay on disk"
    finally:
        good.stop()
        bad.stop()
        daemon.stop()
