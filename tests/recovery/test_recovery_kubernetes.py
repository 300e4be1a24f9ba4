"""The Kubernetes backend through the real kubernetes client. No cluster can run here, so the
client talks to a small HTTP server started in the test that keeps nodes and pods in memory and
records every request: what is checked is what the real client sends (methods, paths, patch
content type and bodies, label selectors, delete options)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

kubernetes = pytest.importorskip("kubernetes", reason="the k8s extra: pip install 'c4[k8s]'")

from recovery.isolation.kubernetes import (  # noqa: E402
    REASON_ANNOTATION,
    TAINT_KEY,
    KubernetesIsolator,
)

pytestmark = [pytest.mark.network]


class FakeApi:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {
            name: {"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": name, "annotations": {}},
                   "spec": {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]}}
            for name in ("node1", "node2")}
        self.pods = [{"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": f"train-{i}", "namespace": "ml",
                                   "labels": {"job-name": "train"}},
                      "spec": {"nodeName": f"node{i + 1}",
                               "containers": [{"name": "trainer", "image": "train:1"}]}}
                     for i in range(2)]
        self.requests: list[dict[str, Any]] = []


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            url = urlparse(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else None
            api.requests.append({"method": self.command, "path": url.path,
                                 "query": parse_qs(url.query), "body": body,
                                 "content_type": self.headers.get("Content-Type")})
            parts = url.path.strip("/").split("/")
            if parts[:3] == ["api", "v1", "nodes"]:
                if len(parts) == 3:
                    return self._reply(200, {"kind": "NodeList", "apiVersion": "v1",
                                             "metadata": {}, "items": list(api.nodes.values())})
                node = api.nodes.get(parts[3])
                if node is None:
                    return self._reply(404, {"kind": "Status", "code": 404,
                                             "reason": "NotFound"})
                if self.command == "PATCH":
                    for section in ("metadata", "spec"):
                        for k, v in (body or {}).get(section, {}).items():
                            if isinstance(v, dict):
                                merged = {**node[section].get(k, {}), **v}
                                node[section][k] = {a: b for a, b in merged.items()
                                                    if b is not None}
                            else:
                                node[section][k] = v
                return self._reply(200, node)
            if parts[:4] == ["api", "v1", "namespaces", "ml"] and parts[4] == "pods":
                if len(parts) == 5:
                    sel = parse_qs(url.query).get("labelSelector", [""])[0]
                    key, _, value = sel.partition("=")
                    items = [p for p in api.pods if p["metadata"]["labels"].get(key) == value]
                    return self._reply(200, {"kind": "PodList", "apiVersion": "v1",
                                             "metadata": {}, "items": items})
                pod = next(p for p in api.pods if p["metadata"]["name"] == parts[5])
                api.pods.remove(pod)
                return self._reply(200, pod)
            return self._reply(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

        do_GET = do_PATCH = do_DELETE = _handle

    return Handler


@pytest.fixture
def fake_api():
    api = FakeApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    with kubernetes.client.ApiClient(cfg) as client:
        yield api, kubernetes.client.CoreV1Api(client)
    server.shutdown()


def test_cordon_taint_restart_release(fake_api):
    api, core = fake_api
    iso = KubernetesIsolator(core, namespace="ml", grace_period_s=15)
    assert iso.isolated() == {}
    iso.isolate("node2", "fault abc of job train: rank 2 is slow")
    patch = [r for r in api.requests if r["method"] == "PATCH"][-1]
    assert patch["path"] == "/api/v1/nodes/node2"
    assert patch["content_type"] == "application/strategic-merge-patch+json"
    assert patch["body"]["spec"]["unschedulable"] is True
    # the node's own taint is kept: a patch replaces the whole list
    assert patch["body"]["spec"]["taints"] == [
        {"key": "gpu", "value": "a100", "effect": "NoSchedule"},
        {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    assert patch["body"]["metadata"]["annotations"][REASON_ANNOTATION].startswith("c4: fault")
    assert list(iso.isolated()) == ["node2"]
    assert iso.isolated()["node2"].startswith("c4: fault abc")

    before = len(api.requests)
    iso.isolate("node2", "again")
    assert not [r for r in api.requests[before:] if r["method"] == "PATCH"], "idempotent"

    note = iso.restart("train", {"node2"})
    assert "2 pod(s)" in note and api.pods == []
    lists = [r for r in api.requests if r["path"] == "/api/v1/namespaces/ml/pods"]
    assert lists[0]["query"]["labelSelector"] == ["job-name=train"]
    deletes = [r for r in api.requests if r["method"] == "DELETE"]
    assert [d["path"] for d in deletes] == ["/api/v1/namespaces/ml/pods/train-0",
                                           "/api/v1/namespaces/ml/pods/train-1"]
    assert all(d["body"]["gracePeriodSeconds"] == 15 for d in deletes)

    iso.release("node2")
    patch = [r for r in api.requests if r["method"] == "PATCH"][-1]
    assert patch["body"]["spec"] == {"unschedulable": False, "taints": [
        {"key": "gpu", "value": "a100", "effect": "NoSchedule"}]}
    assert patch["body"]["metadata"]["annotations"] == {REASON_ANNOTATION: None}
    assert iso.isolated() == {}


def test_errors_say_what_to_do(fake_api):
    from recovery.errors import IsolationError

    _api, core = fake_api
    iso = KubernetesIsolator(core, namespace="ml", pod_selector="app={job}")
    with pytest.raises(IsolationError, match="read node node9"):
        iso.isolate("node9", "x")
    with pytest.raises(IsolationError, match="no pods match 'app=train'"):
        iso.restart("train", {"node1"})
