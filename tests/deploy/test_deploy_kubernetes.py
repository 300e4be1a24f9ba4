"""The Kubernetes manifests: every YAML document is a valid object of its Kubernetes kind (the
`kubernetes` client's models: required fields, types, and no unknown field), every
kustomization names files that exist, the overlays build (`kubectl kustomize`, when kubectl is
installed) into objects that are valid too and whose references resolve, and the settings and
probes fit the c4 commands they run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.deploy_support import DEPLOY, ROOT_ENVVARS, command, read_env_file

K8S = DEPLOY / "kubernetes"
KUSTOMIZATIONS = sorted(K8S.rglob("kustomization.yaml"))
OVERLAYS = sorted(p.parent for p in KUSTOMIZATIONS if p.parent.parent.name == "overlays")


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _patch_files() -> set[Path]:
    out = set()
    for kust in KUSTOMIZATIONS:
        for patch in _load(kust)[0].get("patches", []):
            if "path" in patch:
                out.add((kust.parent / patch["path"]).resolve())
    return out


def _object_files() -> list[Path]:
    patches = _patch_files()
    return sorted(p for p in K8S.rglob("*.yaml")
                  if p.name != "kustomization.yaml" and p.resolve() not in patches)


def model_name(doc: dict[str, Any]) -> str:
    version = doc["apiVersion"].rsplit("/", 1)[-1]
    return version[0].upper() + version[1:] + doc["kind"]


def validate(doc: dict[str, Any]) -> Any:
    """Deserialize ``doc`` into its model as the client does a server response (required
    fields, types), then validate it strictly: an unknown field is an error, not dropped."""
    # the client's models are pydantic (strict about unknown fields) since 37: the dev extra
    pytest.importorskip("kubernetes", minversion="37",
                        reason="the kubernetes client validates the manifests: "
                               "pip install -e '.[dev]'")
    import kubernetes.client
    from kubernetes.client import ApiClient

    name = model_name(doc)
    cls = getattr(kubernetes.client, name, None)
    assert cls is not None, f"no Kubernetes model {name} for {doc['apiVersion']} {doc['kind']}"
    obj = ApiClient().deserialize(json.dumps(doc), name, "application/json")
    assert obj is not None
    cls.model_validate(doc)  # from_dict drops unknown keys; model_validate forbids them
    return obj


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the overlays are not built (each file and "
                    "kustomization was checked on its own)")
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {directory}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def test_validation_rejects_what_the_api_server_would() -> None:
    good = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
            "spec": {"ports": [{"port": 7444, "targetPort": "grpc"}]}}
    validate(good)
    with pytest.raises(ValueError, match="bogus"):
        validate({**good, "spec": {"ports": [{"port": 7444, "bogus": 1}]}})
    with pytest.raises(ValueError, match="name"):
        validate({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                  "spec": {"selector": {}, "template": {"spec": {"containers": [{}]}}}})
    with pytest.raises(ValueError, match="containerPort"):
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                  "spec": {"containers": [{"name": "c", "ports": [{"containerPort": "x"}]}]}})


@pytest.mark.parametrize("path", _object_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_every_manifest_is_a_valid_object(path: Path) -> None:
    docs = _load(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        validate(doc)


@pytest.mark.parametrize("kust", KUSTOMIZATIONS, ids=lambda p: str(p.parent.relative_to(K8S)))
def test_kustomization_references_existing_files(kust: Path) -> None:
    (spec,) = _load(kust)
    assert spec["kind"] in ("Kustomization", "Component")
    here = kust.parent
    refs = list(spec.get("resources", [])) + list(spec.get("components", []))
    refs += [p["path"] for p in spec.get("patches", []) if "path" in p]
    for gen in spec.get("configMapGenerator", []) + spec.get("secretGenerator", []):
        refs += gen.get("envs", []) + [f.split("=", 1)[-1] for f in gen.get("files", [])]
    assert refs or spec.get("configMapGenerator"), f"{kust} refers to nothing"
    for ref in refs:
        target = here / ref
        assert target.exists(), f"{kust.relative_to(K8S)} refers to missing {ref}"
        if target.is_dir():
            assert (target / "kustomization.yaml").exists(), f"{ref} is no kustomization"
    # and no manifest in the tree is forgotten by every kustomization
    if kust.parent == K8S / "base":
        listed = {(here / r).resolve() for r in spec["resources"]}
        assert listed == {p.resolve() for p in here.glob("*.yaml")} - {kust.resolve()}


def _c4_container_env(container: dict[str, Any], configmaps: dict[str, dict[str, str]]
                      ) -> tuple[str, set[str]]:
    """The c4 command a container runs and the C4_* variables it is given."""
    args = container.get("args") or container.get("command", [])[1:]
    names = {e["name"] for e in container.get("env", [])}
    for src in container.get("envFrom", []):
        names |= set(configmaps[src["configMapRef"]["name"]])
    return args[0], {n for n in names if n.startswith("C4_")}


def test_base_settings_and_probes_fit_the_commands() -> None:
    base = {d["metadata"]["name"] + "/" + d["kind"]: d
            for f in _object_files() if f.parent == K8S / "base" for d in _load(f)}
    configmaps = {"c4-daemon": read_env_file(K8S / "base" / "daemon.env", commented=True),
                  "c4-sidecar": read_env_file(K8S / "base" / "sidecar.env", commented=True)}
    daemon = base["c4-daemon/Deployment"]["spec"]["template"]["spec"]
    (ctr,) = daemon["containers"]
    cmd, env = _c4_container_env(ctr, configmaps)
    assert cmd == "daemon" and env <= command("daemon").envvars | ROOT_ENVVARS
    port = int(configmaps["c4-daemon"]["C4_LISTEN"].rsplit(":", 1)[1])
    assert {p["containerPort"] for p in ctr["ports"]} == {port}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert ctr[probe]["grpc"]["port"] == port, probe
    # the gRPC probe speaks plaintext: the daemon must be allowed to serve it off loopback
    assert configmaps["c4-daemon"]["C4_INSECURE"] == "1"
    svc = base["c4-daemon/Service"]["spec"]
    assert svc["selector"].items() <= base["c4-daemon/Deployment"]["spec"]["template"][
        "metadata"]["labels"].items()
    assert [p["targetPort"] for p in svc["ports"]] == [ctr["ports"][0]["name"]]

    ds = base["c4-sidecar/DaemonSet"]["spec"]["template"]["spec"]
    assert ds["hostPID"] and ds["hostNetwork"] and ds["dnsPolicy"] == "ClusterFirstWithHostNet"
    (car,) = ds["containers"]
    cmd, env = _c4_container_env(car, configmaps)
    assert cmd == "sidecar" and env <= command("sidecar").envvars | ROOT_ENVVARS
    caps = car["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"] and set(caps["add"]) == {"SYS_PTRACE", "DAC_READ_SEARCH"}
    assert car["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"] for m in car["volumeMounts"]}
    sidecar_env = configmaps["c4-sidecar"]
    assert str(Path(sidecar_env["C4_SIDECAR_SOCKET"]).parent) in mounts
    assert sidecar_env["C4_SPILL_DIR"] in mounts
    assert sidecar_env["C4_DAEMON"].split(".")[0] == "c4-daemon"
    assert sidecar_env["C4_DAEMON"].endswith(f":{svc['ports'][0]['port']}")


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlay_builds_into_valid_objects_whose_references_resolve(overlay: Path) -> None:
    docs = _kustomize(overlay)
    for doc in docs:
        validate(doc)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "c4-daemon") in kinds and ("DaemonSet", "c4-sidecar") in kinds
    assert all(d["metadata"].get("namespace") == "c4" for d in docs if d["kind"] != "Namespace")
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs
                  if d["kind"] == "ConfigMap"}
    for doc in docs:
        if doc["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        pod = doc["spec"]["template"]
        assert doc["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        for vol in pod["spec"].get("volumes", []):
            if "configMap" in vol and not vol["configMap"].get("optional"):
                assert vol["configMap"]["name"] in configmaps
        for ctr in pod["spec"]["containers"]:
            assert ":" in ctr["image"], f"{ctr['name']}: image without a tag"
            for src in ctr.get("envFrom", []):
                assert src["configMapRef"]["name"] in configmaps
            if doc["metadata"]["name"].startswith("c4-") and ctr["name"] in ("daemon", "sidecar"):
                cmd, env = _c4_container_env(ctr, configmaps)
                assert env <= command(cmd).envvars | ROOT_ENVVARS, (overlay.name, env)
    store = [e for d in docs if d["metadata"]["name"] == "c4-daemon" and d["kind"] == "Deployment"
             for e in d["spec"]["template"]["spec"]["containers"][0].get("env", [])
             if e["name"] == "C4_STORE"]
    assert store, f"{overlay.name} leaves the daemon on the base's throwaway SQLite file"


def test_example_training_job_runs_through_c4_and_reaches_the_sidecar() -> None:
    from tests.deploy.deploy_support import check_c4_argv

    (job,) = _load(K8S / "examples" / "training-job.yaml")
    pod = job["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert check_c4_argv(ctr["command"]).name == "run"
    assert ctr["command"][2:4] == ["--", "torchrun"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    socket = read_env_file(K8S / "base" / "sidecar.env")["C4_SIDECAR_SOCKET"]
    assert env["C4_SIDECAR_SOCKET"] == socket
    mounts = {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    (sidecar,) = [d for d in _load(K8S / "base" / "sidecar-daemonset.yaml")]
    sidecar_host = {v["hostPath"]["path"] for v in sidecar["spec"]["template"]["spec"]["volumes"]
                    if "hostPath" in v}
    (name,) = [n for n, path in mounts.items() if path == str(Path(socket).parent)]
    assert host[name] in sidecar_host


def test_pod_network_component_adds_sys_admin_to_the_sidecar(tmp_path: Path) -> None:
    overlay = tmp_path / "with-pod-network"
    overlay.mkdir()
    # kustomize takes only relative paths to other kustomizations
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(K8S / "base", overlay)],
        "components": [os.path.relpath(K8S / "components" / "pod-network", overlay)]}))
    (ds,) = [d for d in _kustomize(overlay) if d["kind"] == "DaemonSet"]
    validate(ds)
    caps = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert set(caps["add"]) == {"SYS_PTRACE", "DAC_READ_SEARCH", "SYS_ADMIN"}


def test_relays_component_puts_relays_between_the_sidecars_and_the_daemon(tmp_path: Path) -> None:
    overlay = tmp_path / "with-relays"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "namespace": "c4",
        "resources": [os.path.relpath(K8S / "base", overlay)],
        "components": [os.path.relpath(K8S / "components" / "relays", overlay)]}))
    docs = _kustomize(overlay)
    for doc in docs:
        validate(doc)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs
                  if d["kind"] == "ConfigMap"}
    relay = by[("Deployment", "c4-relay")]["spec"]["template"]
    (ctr,) = relay["spec"]["containers"]
    cmd, env = _c4_container_env(ctr, configmaps)
    assert cmd == "relay" and env <= command("relay").envvars | ROOT_ENVVARS
    (relay_env,) = [configmaps[s["configMapRef"]["name"]] for s in ctr["envFrom"]]
    port = int(relay_env["C4_RELAY_LISTEN"].rsplit(":", 1)[1])
    assert {p["containerPort"] for p in ctr["ports"]} == {port}
    for probe in ("readinessProbe", "livenessProbe"):
        assert ctr[probe]["grpc"]["port"] == port, probe
    assert relay_env["C4_INSECURE"] == "1"   # the plaintext gRPC probe, off loopback
    svc = by[("Service", "c4-relay")]["spec"]
    assert svc["selector"].items() <= relay["metadata"]["labels"].items()
    daemon_svc = by[("Service", "c4-daemon")]["spec"]["ports"][0]["port"]
    assert relay_env["C4_DAEMON"] == f"c4-daemon.c4.svc:{daemon_svc}"
    # the sidecars go to the relays, and the daemon does not throttle a relay as one sender
    (car,) = by[("DaemonSet", "c4-sidecar")]["spec"]["template"]["spec"]["containers"]
    (car_env,) = [configmaps[s["configMapRef"]["name"]] for s in car["envFrom"]]
    assert car_env["C4_DAEMON"] == f"c4-relay.c4.svc:{svc['ports'][0]['port']}"
    (dmn,) = by[("Deployment", "c4-daemon")]["spec"]["template"]["spec"]["containers"]
    (daemon_env,) = [configmaps[s["configMapRef"]["name"]] for s in dmn["envFrom"]]
    assert daemon_env["C4_MAX_RPS"] == "0"
