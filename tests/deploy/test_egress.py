"""Egress NetworkPolicies for each role: every workload's pods may reach
DNS and only the destinations their role needs (Kubernetes API, Slurm, Prometheus), at
the CIDRs ``[deploy.kubernetes.egress]`` names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.deploy.rendering import SITE, manifests, render
from tests.support.cli import gotthard

WORKLOADS = ("DaemonSet", "Deployment", "CronJob")


def _pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["metadata"]["labels"]


def _egress_of(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Workload name -> the egress rules of the one Egress policy selecting its pods."""
    policies = [
        o for o in objects if o["kind"] == "NetworkPolicy" and "Egress" in o["spec"]["policyTypes"]
    ]
    out = {}
    for obj in objects:
        if obj["kind"] not in WORKLOADS:
            continue
        labels = _pod_labels(obj)
        ns = obj["metadata"]["namespace"]
        selecting = [
            p
            for p in policies
            if p["metadata"]["namespace"] == ns
            and p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(selecting) == 1, obj["metadata"]["name"]
        out[obj["metadata"]["name"]] = selecting[0]["spec"]["egress"]
    return out


def _ports(rules: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for rule in rules for p in rule["ports"]}


DNS = {("UDP", 53), ("TCP", 53)}


def test_each_role_reaches_only_what_it_needs(objects: list[dict[str, Any]]) -> None:
    egress = _egress_of(objects)
    assert _ports(egress["gotthard-node-exporter"]) == DNS
    assert _ports(egress["gotthard-audit-metrics"]) == DNS
    assert _ports(egress["gotthard-slurm-exporter"]) == DNS | {("TCP", 6817), ("TCP", 6820)}
    assert _ports(egress["gotthard-audit"]) == DNS | {("TCP", 443), ("TCP", 6443)}
    assert _ports(egress["gotthard-dr"]) == DNS | {("TCP", 443), ("TCP", 6443), ("TCP", 9090)}
    assert _ports(egress["gotthard-runbooks"]) == DNS | {
        ("TCP", 443),
        ("TCP", 6443),
        ("TCP", 6817),
        ("TCP", 6820),
        ("TCP", 9090),
    }
    (dns, *_) = egress["gotthard-runbooks"]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]


def test_the_site_names_where_each_destination_is(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(
        SITE.read_text() + "\n[deploy.kubernetes.egress]\n"
        'kubernetes_api_cidrs = ["10.0.0.1/32", "192.0.2.0/24"]\n'
        'slurm_cidrs = ["10.10.0.0/16"]\n'
    )
    objects = [doc for _, doc in manifests(render("kubernetes", tmp_path / "out", site))]
    runbooks = _egress_of(objects)["gotthard-runbooks"]
    to = {
        tuple(p["port"] for p in rule["ports"]): [t["ipBlock"]["cidr"] for t in rule.get("to", [])]
        for rule in runbooks[1:]
    }
    assert to == {
        (443, 6443): ["10.0.0.1/32", "192.0.2.0/24"],
        (6817, 6820): ["10.10.0.0/16"],
        (9090,): [],  # not set: any address, that port only
    }


def test_a_bad_cidr_is_refused_naming_the_key(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(SITE.read_text() + '\n[deploy.kubernetes.egress]\nslurm_cidrs = ["slurm"]\n')
    result = gotthard("--config", str(site), "deploy", "render", "--target", "kubernetes",
                      "--out", str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 2
    assert "slurm_cidrs" in result.stderr and "not a CIDR" in result.stderr
    assert "Traceback" not in result.stderr
