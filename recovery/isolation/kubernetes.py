"""Kubernetes backend: cordon the node and taint it (NoSchedule, so nothing new lands there and
the reason shows in ``kubectl describe node``), then delete the job's pods so that their
controller (a Job, JobSet or PyTorchJob) schedules them again, elsewhere. Needs the ``k8s``
extra (``pip install c4[k8s]``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from recovery.errors import IsolationError
from recovery.isolation.api import REASON_PREFIX, Isolator

TAINT_KEY = "c4.io/isolated"
REASON_ANNOTATION = "c4.io/isolation-reason"


def _api_error(exc: Exception, what: str) -> IsolationError:
    status = getattr(exc, "status", None)
    hint = " (is the service account allowed to patch nodes and delete pods?)" \
        if status in (401, 403) else ""
    return IsolationError(f"kubernetes refused to {what}: {status or ''} "
                          f"{getattr(exc, 'reason', exc)}{hint}")


class KubernetesIsolator(Isolator):
    name = "kubernetes"

    def __init__(self, core_v1: Any, *, namespace: str = "default",
                 pod_selector: str = "job-name={job}", grace_period_s: int = 30) -> None:
        """``core_v1`` is a ``kubernetes.client.CoreV1Api``; ``pod_selector`` is a label
        selector with ``{job}`` standing for c4's job name."""
        self.api = core_v1
        self.namespace = namespace
        self.pod_selector = pod_selector
        self.grace_period_s = grace_period_s

    @classmethod
    def from_kubeconfig(cls, **kwargs: Any) -> KubernetesIsolator:
        try:
            from kubernetes import client, config
        except ImportError:
            raise IsolationError("the kubernetes isolator needs the kubernetes package: "
                                 "pip install 'c4[k8s]'") from None
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return cls(client.CoreV1Api(), **kwargs)

    def _taints(self, node: str) -> list[Any]:
        try:
            obj = self.api.read_node(node)
        except Exception as exc:
            raise _api_error(exc, f"read node {node}") from None
        return list(obj.spec.taints or []) if obj.spec else []

    def isolate(self, node: str, reason: str) -> None:
        from kubernetes import client

        taints = self._taints(node)
        if any(t.key == TAINT_KEY for t in taints):
            return
        taints.append(client.V1Taint(key=TAINT_KEY, value="true", effect="NoSchedule"))
        # spec.taints has no merge key: a patch replaces the whole list, so send all of them
        body = {"metadata": {"annotations": {REASON_ANNOTATION: f"{REASON_PREFIX} {reason}"}},
                "spec": {"unschedulable": True, "taints": taints}}
        try:
            self.api.patch_node(node, body)
        except Exception as exc:
            raise _api_error(exc, f"cordon and taint node {node}") from None

    def release(self, node: str) -> None:
        taints = self._taints(node)
        if not any(t.key == TAINT_KEY for t in taints):
            return
        body = {"metadata": {"annotations": {REASON_ANNOTATION: None}},
                "spec": {"unschedulable": False,
                         "taints": [t for t in taints if t.key != TAINT_KEY]}}
        try:
            self.api.patch_node(node, body)
        except Exception as exc:
            raise _api_error(exc, f"uncordon node {node}") from None

    def isolated(self) -> Mapping[str, str]:
        try:
            nodes = self.api.list_node().items
        except Exception as exc:
            raise _api_error(exc, "list nodes") from None
        out = {}
        for n in nodes:
            if any(t.key == TAINT_KEY for t in (n.spec.taints or [])):
                notes = n.metadata.annotations or {}
                out[n.metadata.name] = notes.get(REASON_ANNOTATION, "")
        return out

    def restart(self, job: str, exclude: Collection[str]) -> str:
        from kubernetes import client

        selector = self.pod_selector.format(job=job)
        try:
            pods = self.api.list_namespaced_pod(self.namespace, label_selector=selector).items
            for pod in pods:
                self.api.delete_namespaced_pod(
                    pod.metadata.name, self.namespace,
                    body=client.V1DeleteOptions(grace_period_seconds=self.grace_period_s))
        except Exception as exc:
            raise _api_error(exc, f"delete the pods of job {job} ({selector})") from None
        if not pods:
            raise IsolationError(f"no pods match {selector!r} in namespace {self.namespace}; "
                                 "set the isolator's pod selector to the job's labels")
        return (f"deleted {len(pods)} pod(s) of {selector} in {self.namespace}; their "
                f"controller reschedules them off {', '.join(sorted(exclude))}")
