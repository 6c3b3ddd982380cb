"""``gotthard deploy render --target kubernetes``: schema-valid, restricted where it can
be, admitted by Gotthard's own pod policies with the waivers it ships as data."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gotthard.deploy.kubernetes import HOST_PID_WHY
from tests.deploy.rendering import FIXTURES, SITE, manifests, render
from tests.support.cli import ROOT, gotthard

#: The Kubernetes version the manifests are validated against (kubernetes-validate).
KUBERNETES_VERSION = "1.30"
CRDS = [
    FIXTURES / "monitoring.coreos.com_servicemonitors.yaml",
    FIXTURES / "monitoring.coreos.com_podmonitors.yaml",
    ROOT
    / "tests"
    / "fixtures"
    / "prometheus-operator-crds"
    / "monitoring.coreos.com_prometheusrules.yaml",
]
WORKLOADS = ("DaemonSet", "Deployment", "CronJob")

Find = Callable[[str, str], dict[str, Any]]


def crd_validators() -> dict[str, jsonschema.Draft202012Validator]:
    """Kind -> validator of the CRD's openAPIV3Schema (version v1)."""
    found = {}
    for path in CRDS:
        crd = yaml.safe_load(path.read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        schema = version["schema"]["openAPIV3Schema"]
        found[crd["spec"]["names"]["kind"]] = jsonschema.Draft202012Validator(schema)
    return found


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def test_every_manifest_validates_against_the_kubernetes_schema(
    objects: list[dict[str, Any]],
) -> None:
    kinds = {o["kind"] for o in objects}
    assert kinds >= {
        "Namespace", "ConfigMap", "ServiceAccount", "Role", "ClusterRole", "RoleBinding",
        "ClusterRoleBinding", "DaemonSet", "Deployment", "CronJob", "Service",
        "NetworkPolicy", "PodDisruptionBudget", "ServiceMonitor", "PodMonitor",
        "PrometheusRule",
    }  # fmt: skip
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # custom resources: against their CRDs below
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {err.message} at {err.path}")


def test_the_schema_check_catches_a_wrong_field(find: Find) -> None:
    broken = json.loads(json.dumps(find("Deployment", "gotthard-dr")))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_custom_resources_validate_against_their_crds(objects: list[dict[str, Any]]) -> None:
    validators = crd_validators()
    custom = [o for o in objects if o["apiVersion"] == "monitoring.coreos.com/v1"]
    assert {o["kind"] for o in custom} == set(validators)
    for obj in custom:
        errors = [e.message for e in validators[obj["kind"]].iter_errors(obj)]
        assert not errors, f"{obj['kind']}/{obj['metadata']['name']}: {errors}"


def test_the_crd_check_catches_a_bad_interval(find: Find) -> None:
    broken = json.loads(json.dumps(find("ServiceMonitor", "gotthard-dr")))
    broken["spec"]["endpoints"][0]["interval"] = "30 seconds"
    assert list(crd_validators()["ServiceMonitor"].iter_errors(broken))


def test_monitors_add_the_site_models_labels(objects: list[dict[str, Any]]) -> None:
    monitors = [o for o in objects if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    assert len(monitors) == 5  # 4 roles and the audit metrics exporter
    for monitor in monitors:
        (endpoint,) = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
        labels = {r["targetLabel"]: r["replacement"] for r in endpoint["relabelings"]}
        assert labels == {"site": "zurich", "cluster": "alps-k8s"}
    for obj in objects:
        assert obj["metadata"]["labels"]["gotthard.io/site"] == "zurich", obj["metadata"]


def test_rules_and_dashboards_are_delivered(objects: list[dict[str, Any]]) -> None:
    rules = [o for o in objects if o["kind"] == "PrometheusRule"]
    entries = [r for rule in rules for g in rule["spec"]["groups"] for r in g["rules"]]
    assert any("record" in r for r in entries) and any("alert" in r for r in entries)
    dashboards = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"]["labels"]
    ]
    assert dashboards
    for board in dashboards:
        (text,) = board["data"].values()
        assert json.loads(text)["uid"] == board["metadata"]["name"]


def test_api_only_roles_pass_the_restricted_profile(objects: list[dict[str, Any]]) -> None:
    """Pod Security Standards Restricted, field by field, for the ``gotthard`` namespace;
    the namespace enforces it."""
    (ns,) = [o for o in objects if o["kind"] == "Namespace" and o["metadata"]["name"] == "gotthard"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    restricted_volumes = {"configMap", "emptyDir", "secret", "projected", "persistentVolumeClaim"}
    workloads = [o for o in objects if o["kind"] in WORKLOADS]
    assert len(workloads) == 6  # 5 roles and the audit metrics exporter
    for obj in workloads:
        spec = pod_spec(obj)
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["readOnlyRootFilesystem"] is True
            assert "privileged" not in sc
            assert set(container["resources"]["limits"]) == {"cpu", "memory"}
        if obj["metadata"]["namespace"] == "gotthard":
            assert not spec.get("hostPID") and not spec.get("hostNetwork")
            for volume in spec["volumes"]:
                assert set(volume) - {"name"} <= restricted_volumes, volume


def test_the_node_exporter_reads_the_host_read_only(find: Find, kubernetes_dir: Path) -> None:
    daemonset = find("DaemonSet", "gotthard-node-exporter")
    assert daemonset["metadata"]["namespace"] == "gotthard-node"
    spec = pod_spec(daemonset)
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert sorted(host.values()) == ["/proc", "/sys", "/var/lib/kubelet/pod-resources"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert all(mounts[name]["readOnly"] for name in host)
    assert spec["hostPID"] is True
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    text = (kubernetes_dir / "node-exporter.yaml").read_text()
    comment = "\n".join(f"      # {line}" for line in HOST_PID_WHY.splitlines())
    assert f"{comment}\n      hostPID: true" in text


def test_the_site_turns_host_pid_off(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(
        SITE.read_text() + '\n[deploy.kubernetes]\nhost_pid = false\nslurm_auth = "munge"\n'
    )
    out = render("kubernetes", tmp_path / "out", site)
    objects = {(o["kind"], o["metadata"]["name"]): o for _, o in manifests(out)}
    node = pod_spec(objects["DaemonSet", "gotthard-node-exporter"])
    assert "hostPID" not in node
    assert "hostPID" not in (out / "node-exporter.yaml").read_text()
    # munge: the Slurm exporter mounts the node's munge socket, in the host-access namespace
    slurm = objects["Deployment", "gotthard-slurm-exporter"]
    assert slurm["metadata"]["namespace"] == "gotthard-node"
    paths = {v["hostPath"]["path"] for v in pod_spec(slurm)["volumes"] if "hostPath" in v}
    assert paths == {"/run/munge", "/etc/slurm"}


def test_secrets_dr_replicas_and_budgets(find: Find, objects: list[dict[str, Any]]) -> None:
    slurm = pod_spec(find("Deployment", "gotthard-slurm-exporter"))["containers"][0]
    jwt = {e["name"]: e for e in slurm["env"]}["SLURM_JWT"]
    assert jwt["valueFrom"]["secretKeyRef"] == {"name": "gotthard-slurmrestd-token", "key": "token"}
    webhook = pod_spec(find("Deployment", "gotthard-runbooks"))
    (token,) = [v for v in webhook["volumes"] if v["name"] == "token"]
    assert token["secret"]["secretName"] == "gotthard-runbooks-token"
    dr = find("Deployment", "gotthard-dr")
    assert dr["spec"]["replicas"] == 2
    assert find("PodDisruptionBudget", "gotthard-dr")["spec"]["minAvailable"] == 1
    deny = [
        o["metadata"]["namespace"]
        for o in objects
        if o["kind"] == "NetworkPolicy" and o["spec"]["podSelector"] == {}
    ]
    assert sorted(deny) == ["gotthard", "gotthard-node"]


def test_rbac_names_every_verb_and_resource(objects: list[dict[str, Any]]) -> None:
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (role["metadata"]["name"], rule)
    accounts = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    assert sorted(accounts) == [
        "gotthard-audit", "gotthard-dr", "gotthard-node-exporter",
        "gotthard-runbooks", "gotthard-slurm-exporter",
    ]  # fmt: skip


def _eval(path: Path, *data: str) -> tuple[int, str]:
    extra = ["--data", data[0]] if data else []
    result = gotthard("policy", "eval", "--input", str(path), *extra, timeout=120)
    return result.returncode, result.stdout + result.stderr


def test_workloads_pass_gotthard_pod_policies_with_the_waivers(
    objects: list[dict[str, Any]], kubernetes_dir: Path, tmp_path: Path
) -> None:
    waivers = kubernetes_dir / "waivers" / "policy-data.yml"
    assert "/proc" in waivers.read_text()
    for obj in (o for o in objects if o["kind"] in WORKLOADS):
        name = obj["metadata"]["name"]
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(obj))
        rc, out = _eval(path, str(waivers))
        assert rc == 0, f"{name}: {out}"
        # without the waivers the image's registry and the host paths are denied
        rc, out = _eval(path)
        assert rc == 1, f"{name}: {out}"
        assert "POD-IMG-001" in out
        if name == "gotthard-node-exporter":
            assert "POD-HOSTPATH-001" in out


def test_the_waivers_hold_the_api_roles_to_the_restricted_profile(
    find: Find, kubernetes_dir: Path, tmp_path: Path
) -> None:
    """The waivers switch the restricted rules on: a container that may escalate, or
    hostPath volumes outside the host-access namespace, are denied."""
    waivers = str(kubernetes_dir / "waivers" / "policy-data.yml")
    escalating = json.loads(json.dumps(find("Deployment", "gotthard-dr")))
    pod_spec(escalating)["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    path = tmp_path / "escalating.yaml"
    path.write_text(yaml.safe_dump(escalating))
    rc, out = _eval(path, waivers)
    assert rc == 1 and "POD-PSS-R-ESCALATION-001" in out, out
    moved = json.loads(json.dumps(find("DaemonSet", "gotthard-node-exporter")))
    moved["metadata"]["namespace"] = "gotthard"
    path.write_text(yaml.safe_dump(moved))
    rc, out = _eval(path, waivers)
    # restricted's volume-type rule, or baseline's hostPath rule it replaces
    assert rc == 1, out
    assert "POD-PSS-R-VOLUMES-001" in out or "POD-PSS-B-HOSTPATH-001" in out, out


def test_bad_target_and_unwritable_directory_are_one_line_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = gotthard("deploy", "render", "--target", "helm", "--out", str(out))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "gotthard deploy: unknown target 'helm';"
        " known: kubernetes, kustomize, systemd, prometheus, thanos, local, spiffe"
    ]
    assert not out.exists()
    blocked = tmp_path / "file"
    blocked.write_text("")
    result = gotthard("deploy", "render", "--target", "systemd", "--out", str(blocked / "x"))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"gotthard deploy: {blocked / 'x'}: cannot write")
