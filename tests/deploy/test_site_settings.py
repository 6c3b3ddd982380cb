"""``[deploy.kubernetes]``: a site's own resources, scheduling, image digest, alert links and
operator labels, and the AlertmanagerConfig beside the manifests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gotthard.deploy.settings import DEFAULT_RESOURCES
from tests.deploy.rendering import FIXTURES, SITE, attempt_render, manifests, render
from tests.support.cli import gotthard

DIGEST = "sha256:" + "0123456789abcdef" * 4
SLURM_DIGEST = "sha256:" + "fedcba9876543210" * 4
SITE_SETTINGS = f"""
[deploy.kubernetes]
image_registry = "registry.zurich.example/hpc"
image_tag = "1.2.3"
image_digest = "{DIGEST}"
slurm_image = "registry.zurich.example/hpc/gotthard:1.2.3-slurm@{SLURM_DIGEST}"
priority_class_name = "gotthard-critical"
node_priority_class_name = "system-node-critical"
runtime_class_name = "gvisor"
node_runtime_class_name = "nvidia"
image_pull_secrets = ["zurich-pull"]
runbook_base_url = "https://docs.zurich.example/gotthard/runbooks/"
dashboard_base_url = "https://grafana.zurich.example"
monitor_labels = {{ release = "kps-zurich" }}
rule_labels = {{ release = "kps-zurich", role = "alert-rules" }}

[deploy.kubernetes.resources.slurm-exporter]
memory_limit = "1Gi"

[deploy.kubernetes.resources.audit-metrics]
memory_request = "32Mi"

[[deploy.kubernetes.api_tolerations]]
key = "dedicated"
operator = "Equal"
value = "infra"
effect = "NoSchedule"
"""
WORKLOADS = ("DaemonSet", "Deployment", "CronJob")


def yaml_loader() -> type[yaml.SafeLoader]:
    """PyYAML reads a bare ``=`` (the CRD's matchType enum) as its ``value`` type."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: node.value)
    return Loader


def alertmanager_config_schema() -> dict[str, Any]:
    path = FIXTURES / "monitoring.coreos.com_alertmanagerconfigs.yaml"
    crd = yaml.load(path.read_text(), Loader=yaml_loader())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def alertmanager_config_errors(obj: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Schema errors of *obj*, child routes included: the CRD leaves ``routes`` free-form
    (the operator checks them against the route schema itself)."""
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)]
    route_schema = schema["properties"]["spec"]["properties"]["route"]
    pending = list(obj["spec"]["route"].get("routes", []))
    while pending:
        child = pending.pop()
        errors += [
            e.message for e in jsonschema.Draft202012Validator(route_schema).iter_errors(child)
        ]
        pending += child.get("routes", [])
    return errors


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def site_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("site") / "site.toml"
    path.write_text(SITE.read_text() + SITE_SETTINGS)
    return path


@pytest.fixture(scope="module")
def rendered(
    site_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], Any]:
    out = render("kubernetes", tmp_path_factory.mktemp("k8s"), site_file)
    return {(o["kind"], o["metadata"]["name"]): o for _, o in manifests(out)}


def test_the_site_sets_scheduling_image_and_resources(rendered: dict[tuple[str, str], Any]) -> None:
    workloads = [o for (kind, _), o in rendered.items() if kind in WORKLOADS]
    # every role's workload, the audit's metrics Deployment included
    assert sorted(o["metadata"]["name"] for o in workloads) == [
        "gotthard-audit",
        "gotthard-audit-metrics",
        "gotthard-dr",
        "gotthard-node-exporter",
        "gotthard-runbooks",
        "gotthard-slurm-exporter",
    ]
    for obj in workloads:
        spec = pod_spec(obj)
        node = obj["kind"] == "DaemonSet"
        assert spec["priorityClassName"] == (
            "system-node-critical" if node else "gotthard-critical"
        )
        assert spec["runtimeClassName"] == ("nvidia" if node else "gvisor")
        assert spec["imagePullSecrets"] == [{"name": "zurich-pull"}]
        (container,) = spec["containers"]
        # the webhook runs the -slurm variant, pinned by its own digest
        tag, digest = (
            ("1.2.3-slurm", SLURM_DIGEST)
            if "runbooks" in obj["metadata"]["name"]
            else ("1.2.3", DIGEST)
        )
        assert container["image"] == f"registry.zurich.example/hpc/gotthard:{tag}@{digest}"
        if not node:
            assert spec["tolerations"] == [
                {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
            ]
    slurm = pod_spec(rendered["Deployment", "gotthard-slurm-exporter"])["containers"][0]
    # the one key the site changed; the others keep the benchmark-derived defaults
    assert slurm["resources"] == {
        "requests": {"cpu": "50m", "memory": "96Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    dr = pod_spec(rendered["Deployment", "gotthard-dr"])["containers"][0]
    assert dr["resources"]["limits"]["memory"] == DEFAULT_RESOURCES["dr"]["memory_limit"]
    metrics = pod_spec(rendered["Deployment", "gotthard-audit-metrics"])["containers"][0]
    assert metrics["resources"] == {
        "requests": {"cpu": "10m", "memory": "32Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"},
    }


def test_operator_labels(rendered: dict[tuple[str, str], Any]) -> None:
    # one monitor per role that serves metrics: the node exporter's pods, and the Services
    # of the Slurm exporter, DR, the webhook and the audit's metrics
    kinds = {
        "ServiceMonitor": [
            "gotthard-audit-metrics",
            "gotthard-dr",
            "gotthard-runbooks",
            "gotthard-slurm-exporter",
        ],
        "PodMonitor": ["gotthard-node-exporter"],
    }
    for kind, names in kinds.items():
        found = [o for (k, _), o in rendered.items() if k == kind]
        assert sorted(o["metadata"]["name"] for o in found) == names
        assert all(o["metadata"]["labels"]["release"] == "kps-zurich" for o in found)
    rules = [o for (k, _), o in rendered.items() if k == "PrometheusRule"]
    assert rules
    for rule in rules:
        assert rule["metadata"]["labels"]["role"] == "alert-rules"


def test_defaults_are_what_kube_prometheus_stack_selects(objects: list[dict[str, Any]]) -> None:
    selected = [
        o for o in objects if o["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")
    ]
    assert len(selected) > 4
    for obj in selected:
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack", obj["metadata"]
    slurm = [o for o in objects if o["metadata"]["name"] == "gotthard-slurm-exporter"]
    (deployment,) = [o for o in slurm if o["kind"] == "Deployment"]
    limits = pod_spec(deployment)["containers"][0]["resources"]["limits"]
    assert limits["memory"] == "320Mi"  # the scale benchmark's 300 MB ceiling


def test_no_example_org_where_the_site_sets_the_links(site_file: Path, tmp_path: Path) -> None:
    for target in ("kubernetes", "prometheus"):
        out = tmp_path / target
        result = gotthard(
            "--config", str(site_file), "deploy", "render", "--target", target, "--out", str(out)
        )
        assert result.returncode == 0, result.stderr
        assert "warning" not in result.stderr
        texts = {
            p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()
        }
        placeholders = {name for name, text in texts.items() if "example.org" in text}
        # the one left: the policy bundle's shipped registry allow-list, which the waivers
        # repeat (a site's policy data replaces it; it is no link on an alert)
        assert placeholders <= {"waivers/policy-data.yml"}, placeholders
        for name in placeholders:
            assert {line.strip() for line in texts[name].splitlines() if "example.org" in line} == {
                "- registry.gotthard.example.org"
            }
        links = "https://docs.zurich.example/gotthard/runbooks/GPULost.md"
        assert any(links in text for text in texts.values())
    # `rules build` takes the same links from the site file
    out = tmp_path / "rules"
    result = gotthard("--config", str(site_file), "rules", "build", "--out", str(out))
    assert result.returncode == 0, result.stderr
    alerts = (out / "alerts.rules.yml").read_text()
    assert "example.org" not in alerts
    assert "https://grafana.zurich.example/d/" in alerts


def test_placeholders_left_in_are_a_warning_naming_the_key(tmp_path: Path) -> None:
    result = gotthard(
        "--config", str(SITE), "deploy", "render", "--target", "kubernetes", "--out", str(tmp_path)
    )
    assert result.returncode == 0
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 2
    assert "[deploy.kubernetes] runbook_base_url" in warnings[0]
    assert "https://gotthard.example.org" in warnings[0]
    assert "[deploy.kubernetes] dashboard_base_url" in warnings[1]


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ('image_digest = "sha256:abc"', "image_digest"),
        ('image_digest = "@sha256:' + "0" * 64 + '"', "image_digest"),
        ('image_tag = "1.0@sha256:' + "0" * 64 + '"', "image_tag"),
        # the -slurm variant has a digest of its own: pinning one image is not both
        ('image_digest = "sha256:' + "0" * 64 + '"', "slurm_image: empty, but image_digest"),
        ('resources = { dr = { memory_request = "1Gi" } }', "resources.dr"),
        ('resources = { webhook = { memory_limit = "1Gi" } }', "resources"),
        ('resources = { dr = { memory_limit = "lots" } }', "resources.dr.memory_limit"),
        ('priority_class_name = "Not A Name"', "priority_class_name"),
    ],
)
def test_bad_settings_are_exit_2_naming_the_key(setting: str, key: str, tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(SITE.read_text() + f"\n[deploy.kubernetes]\n{setting}\n")
    result = attempt_render("kubernetes", tmp_path / "o", site)
    assert result.returncode == 2, result.stderr
    assert f"deploy.kubernetes.{key}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_alertmanager_config_validates_against_its_crd(kubernetes_dir: Path) -> None:
    (obj,) = yaml.safe_load_all((kubernetes_dir / "alertmanager-config.yaml").read_text())
    assert obj["kind"] == "AlertmanagerConfig"
    assert obj["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    assert obj["metadata"]["namespace"] == "monitoring"  # the Alertmanager's own namespace
    schema = alertmanager_config_schema()
    assert alertmanager_config_errors(obj, schema) == []
    spec = obj["spec"]
    names = {r["name"] for r in spec["receivers"]}
    pending = [spec["route"]]
    while pending:  # every route names a receiver the object defines
        route = pending.pop()
        assert route["receiver"] in names
        pending += route.get("routes", [])
    hooks = [h for r in spec["receivers"] for h in r.get("webhookConfigs", [])]
    tokens = [h["httpConfig"]["authorization"]["credentials"] for h in hooks if "httpConfig" in h]
    assert tokens and all(t == {"name": "gotthard-runbooks-token", "key": "token"} for t in tokens)
    # the shared webhook is the runbook webhook's Service (no webhook_url in the site file)
    urls = {
        h["url"]
        for r in spec["receivers"]
        if r["name"] == "gotthard-runbook-webhook"
        for h in r["webhookConfigs"]
    }
    assert urls == {"http://gotthard-runbooks.gotthard.svc:9878/alerts"}
    assert spec["inhibitRules"]
    # the check catches a broken child route and a broken matcher
    broken = copy.deepcopy(obj)
    broken["spec"]["route"]["routes"][0]["groupWait"] = "soon"
    broken["spec"]["inhibitRules"][0]["sourceMatch"][0]["matchType"] = "=="
    assert len(alertmanager_config_errors(broken, schema)) == 2
