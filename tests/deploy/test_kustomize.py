"""``deploy render --target kustomize`` and ``--site``: one site file renders a base and an
overlay per site; the real ``kubectl kustomize`` builds each overlay into exactly that
site's ``--target kubernetes --site SITE`` render, and every object validates."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gotthard.deploy.roles import KUBERNETES_ROLES
from tests.deploy.rendering import attempt_render, manifests, render
from tests.deploy.test_kubernetes import KUBERNETES_VERSION, crd_validators
from tests.deploy.test_site_settings import (
    alertmanager_config_errors,
    alertmanager_config_schema,
    yaml_loader,
)
from tests.support.cli import ROOT, gotthard, run
from tests.support.monitoring import binary

EXAMPLE = ROOT / "docs" / "site.example.toml"
SITES = ("zurich", "lugano")
CLUSTERS = {"zurich": "alps", "lugano": "todi-k8s"}  # the file's own, the site's Kubernetes
SITE_LABELS = ("gotthard.io/site", "gotthard.io/cluster")
HASHED = re.compile(r"^(gotthard-site)-[a-z0-9]{10}$")


@pytest.fixture(scope="module")
def kustomized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render("kustomize", tmp_path_factory.mktemp("kustomize"), EXAMPLE)


@pytest.fixture(scope="module")
def per_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("per-site")
    result = gotthard(
        "--config", str(EXAMPLE), "deploy", "render", "--target", "kubernetes",
        "--site", "all", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def build(overlay: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize OVERLAY`` with the kubectl on PATH (its version: docs/deploy.md),
    or the one ``GOTTHARD_KUBECTL`` names (e.g. Debian 12's, kustomize v2.0.3)."""
    kubectl = os.environ.get("GOTTHARD_KUBECTL") or binary("kubectl")
    result = run([kubectl, "kustomize", str(overlay)], timeout=120)
    assert result.returncode == 0, result.stderr
    # kustomize writes the AlertmanagerConfig's matchType `=` bare, a string in YAML 1.2
    return [doc for doc in yaml.load_all(result.stdout, Loader=yaml_loader()) if doc]


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def neutral(document: Any) -> Any:
    """*document* without what only kustomize or the site labels make differ: the site
    labels (metadata, templates, selectors), the ConfigMap name's hash suffix, and peer
    selectors written as ``matchExpressions``."""
    if isinstance(document, list):
        return [neutral(item) for item in document]
    if isinstance(document, str):
        found = HASHED.match(document)
        return found.group(1) if found else document
    if not isinstance(document, dict):
        return document
    out = {k: neutral(v) for k, v in document.items() if k not in SITE_LABELS}
    expressions = out.pop("matchExpressions", None)
    if expressions is not None:
        labels = dict(out.get("matchLabels", {}))
        labels.update({e["key"]: e["values"][0] for e in expressions})
        out["matchLabels"] = labels
    for name in ("labels", "matchLabels", "metadata"):
        if out.get(name) == {}:
            del out[name]
    return out


@pytest.mark.parametrize("site", SITES)
def test_each_overlay_builds_and_every_object_validates(kustomized: Path, site: str) -> None:
    objects = build(kustomized / "overlays" / site)
    validators = crd_validators()
    schema = alertmanager_config_schema()
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "DaemonSet", "CronJob", "ServiceMonitor", "PrometheusRule"} <= kinds
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        labels = obj["metadata"]["labels"]
        # the labels a prune selects by: `-l app.kubernetes.io/part-of=gotthard,gotthard.io/site=S`
        assert labels["app.kubernetes.io/part-of"] == "gotthard", name
        assert (
            labels["gotthard.io/site"] == site and labels["gotthard.io/cluster"] == CLUSTERS[site]
        )
        if obj["apiVersion"] == "monitoring.coreos.com/v1alpha1":
            assert alertmanager_config_errors(obj, schema) == [], name
        elif obj["apiVersion"].startswith("monitoring.coreos.com/"):
            errors = [e.message for e in validators[obj["kind"]].iter_errors(obj)]
            assert not errors, f"{name}: {errors}"
        else:
            try:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{site}: {name}: {err.message} at {err.path}")
    # commonLabels reaches selectors: the NetworkPolicies' peers must still select the
    # monitoring pods, which carry no Gotthard label
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        for rule in policy["spec"].get("ingress", []):
            for peer in rule.get("from", []):
                assert "gotthard.io/site" not in str(peer.get("podSelector", {})), policy
        # nor the egress peers (the cluster DNS pods)
        for rule in policy["spec"].get("egress", []):
            for peer in rule.get("to", []):
                assert "gotthard.io/site" not in str(peer.get("podSelector", {})), policy
    # the base brings every role's egress policy and the drills' scratch-namespace policy
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for role in KUBERNETES_ROLES:
        assert ("NetworkPolicy", f"{role.full_name}-egress") in names, role.name
    scratch = "gotthard-dr-scratch-namespaces"
    assert {
        ("ValidatingAdmissionPolicy", scratch),
        ("ValidatingAdmissionPolicyBinding", scratch),
    } <= names


@pytest.mark.parametrize("site", SITES)
def test_each_overlay_is_that_sites_render(kustomized: Path, per_site: Path, site: str) -> None:
    built = {key(o): neutral(o) for o in build(kustomized / "overlays" / site)}
    expected = {key(o): neutral(o) for _, o in manifests(per_site / site)}
    assert set(built) == set(expected)
    for name, obj in expected.items():
        if built[name] != obj:
            diff = difflib.unified_diff(
                yaml.safe_dump(obj).splitlines(), yaml.safe_dump(built[name]).splitlines()
            )
            pytest.fail(f"{site}: {name} differs:\n" + "\n".join(diff))
    # the site file the pods read names their site and cluster, and keeps every comment
    (site_map,) = [
        o
        for _, o in manifests(per_site / site)
        if key(o) == ("ConfigMap", "gotthard", "gotthard-site")
    ]
    text = site_map["data"]["site.toml"]
    original = EXAMPLE.read_text()
    changed = [
        line
        for line in difflib.ndiff(original.splitlines(), text.splitlines())
        if line.startswith(("+ ", "- "))
    ]
    if site == "zurich":
        assert changed == []
    else:
        assert changed == [
            '- site = "zurich"',
            '- cluster = "alps"',
            '+ site = "lugano"',
            '+ cluster = "todi-k8s"',
        ]


def test_overlays_hold_only_what_differs(kustomized: Path, per_site: Path) -> None:
    renders = {s: {key(o): neutral(o) for _, o in manifests(per_site / s)} for s in SITES}
    differing = {k for k, obj in renders["zurich"].items() if renders["lugano"].get(k) != obj}
    assert differing  # the monitors' site labels at least
    for site in SITES:
        overlay = kustomized / "overlays" / site
        kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
        patched = {
            (p["target"]["kind"], p["target"].get("namespace", ""), p["target"]["name"])
            for p in kustomization.get("patchesJson6902", [])
        }
        assert patched == differing
        assert "resources" not in kustomization  # both sites have every object
        files = {p.relative_to(overlay).parts[0] for p in overlay.rglob("*") if p.is_file()}
        assert files == {"kustomization.yaml", "credentials.txt", "patches"}
        for patch in (overlay / "patches").iterdir():  # each states this site's value
            ops = yaml.safe_load(patch.read_text())
            assert ops and all(op["op"] in ("replace", "add", "remove") for op in ops)
    base = kustomized / "base"
    assert "gotthard.io/site:" not in "".join(p.read_text() for p in base.glob("*.yaml"))


def test_the_site_option(tmp_path: Path) -> None:
    out = tmp_path / "lugano"
    result = gotthard(
        "--config", str(EXAMPLE), "deploy", "render", "--target", "kubernetes",
        "--site", "lugano", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    objects = [o for _, o in manifests(out)]
    assert {o["metadata"]["labels"]["gotthard.io/site"] for o in objects} == {"lugano"}
    for args, message in (
        (["--target", "kubernetes", "--site", "bern"], "--site bern: not a site of the site model"),
        (["--target", "systemd", "--site", "lugano"], "--site: applies to --target kubernetes"),
    ):
        result = gotthard(
            "--config", str(EXAMPLE), "deploy", "render", *args, "--out", str(tmp_path / "x")
        )
        assert result.returncode == 2
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"gotthard deploy: {message}"), line
    # a site's cluster set by [deploy.kubernetes] clusters, checked against the model
    site = tmp_path / "site.toml"
    site.write_text(
        EXAMPLE.read_text().replace("\nclusters = {}", '\nclusters = { lugano = "todi" }', 1)
    )
    result = gotthard(
        "--config", str(site), "deploy", "render", "--target", "kubernetes",
        "--site", "lugano", "--out", str(tmp_path / "todi"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    labels = {
        o["metadata"]["labels"]["gotthard.io/cluster"] for _, o in manifests(tmp_path / "todi")
    }
    assert labels == {"todi"}
    site.write_text(site.read_text().replace('lugano = "todi"', 'lugano = "alps"'))
    result = attempt_render("kustomize", tmp_path / "y", site)
    assert result.returncode == 2
    assert (
        "deploy.kubernetes.clusters.lugano: 'alps' is not a cluster of site 'lugano'"
        in result.stderr
    )
