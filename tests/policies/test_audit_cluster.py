"""``gotthard audit cluster`` against kmock's KubernetesEmulator over real HTTP.

The emulator (``tests.support.kube``) is an in-memory Kubernetes API, not a
kube-apiserver; objects are created through the official ``kubernetes`` client, then the
audit reads them back with a kubeconfig file pointing at the emulator.

Cluster-scoped StorageClasses and the PeerAuthentication custom resources (cluster-wide
LIST) need no workaround. Assertions compare rule ids, never messages.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from gotthard.policies import testing
from tests.support.cli import run_in_process
from tests.support.kube import CONFIGMAPS, PODS, STORAGE_CLASSES, EmulatorThread, Resource


def audit_cluster(*istio_versions: str) -> EmulatorThread:
    """An emulator with Pods, StorageClasses and the Istio CRD in *istio_versions*."""
    peer_auths = [
        Resource(f"security.istio.io/{version}/peerauthentications", "PeerAuthentication")
        for version in istio_versions
    ]
    return EmulatorThread(PODS, STORAGE_CLASSES, *peer_auths)


# --- objects -------------------------------------------------------------------------

GOOD_IMAGE = "registry.gotthard.example.org/train:1.4.2"


def pod(namespace: str, name: str, **change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A compliant pod; ``change`` callbacks make it violate one thing each."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "securityContext": {"runAsNonRoot": True},
            "containers": [
                {
                    "name": "main",
                    "image": GOOD_IMAGE,
                    "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
                }
            ],
        },
    }
    for fn in change.values():
        fn(obj)
    return obj


def _privileged(p: dict[str, Any]) -> None:
    p["spec"]["containers"][0]["securityContext"] = {"privileged": True}


def _hostpath(p: dict[str, Any]) -> None:
    p["spec"]["volumes"] = [{"name": "etc", "hostPath": {"path": "/etc"}}]


def _lustre_hostpath(p: dict[str, Any]) -> None:
    p["spec"]["volumes"] = [{"name": "scratch", "hostPath": {"path": "/capstor/scratch"}}]


def _latest(p: dict[str, Any]) -> None:
    p["spec"]["containers"][0]["image"] = "registry.gotthard.example.org/train:latest"


def _host_network(p: dict[str, Any]) -> None:
    p["spec"]["hostNetwork"] = True


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }


def peer_auth(ns: str, mode: str, version: str = "v1", name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": f"security.istio.io/{version}",
        "kind": "PeerAuthentication",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"mtls": {"mode": mode}},
    }


def storage_class(name: str, parameters: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "lustre.csi.hpe.com",
        "parameters": parameters,
        "reclaimPolicy": "Retain",
    }


def load(emu: EmulatorThread, objects: list[dict[str, Any]]) -> None:
    """Create the objects through the kubernetes client (as kubectl apply would)."""
    with emu.api() as api:
        core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
        custom = client.CustomObjectsApi(api)
        for obj in objects:
            kind = obj["kind"]
            if kind == "Namespace":
                assert core.create_namespace(obj) is not None
            elif kind == "Pod":
                created = core.create_namespaced_pod(obj["metadata"]["namespace"], obj)
                assert created is not None  # the 201 workaround
            elif kind == "StorageClass":
                assert storage.create_storage_class(obj) is not None
            else:
                group, version = obj["apiVersion"].split("/")
                custom.create_namespaced_custom_object(
                    group,
                    version,
                    obj["metadata"]["namespace"],
                    "peerauthentications",
                    obj,
                )


# The main cluster: every rule id expected per object (objects not listed are clean).
MAIN_OBJECTS = [
    namespace("team-a"),  # a workload namespace, no MPI label, STRICT mTLS
    namespace("mpi-jobs", {"gotthard.io/network": "mpi"}),  # MPI label, STRICT mTLS
    namespace("legacy"),  # no STRICT PeerAuthentication (a PERMISSIVE one)
    namespace("kube-system"),  # exempt from the mesh rule
    pod("team-a", "compliant"),
    pod("team-a", "lustre-mount", v=_lustre_hostpath),  # allow-listed hostPath
    pod("team-a", "privileged", v=_privileged),
    pod("team-a", "hostpath", v=_hostpath),
    pod("team-a", "latest", v=_latest),
    pod("team-a", "hostnet", v=_host_network),  # namespace not labelled for MPI
    pod("mpi-jobs", "allreduce", v=_host_network),  # labelled by the live Namespace
    storage_class("lustre-scratch", {"fsname": "scratch"}),  # rootSquash missing
    storage_class("lustre-home", {"fsname": "home", "rootSquash": "true"}),
    peer_auth("team-a", "STRICT"),
    peer_auth("mpi-jobs", "STRICT"),
    peer_auth("legacy", "PERMISSIVE"),
]

EXPECTED = {
    ("Pod", "team-a/privileged"): ["POD-PRIV-001"],
    ("Pod", "team-a/hostpath"): ["POD-HOSTPATH-001"],
    ("Pod", "team-a/latest"): ["POD-IMG-002"],
    ("Pod", "team-a/hostnet"): ["POD-HOSTNET-001"],
    ("StorageClass", "lustre-scratch"): ["SC-LUSTRE-001"],
    ("Namespace", "legacy"): ["MESH-MTLS-001"],
    ("PeerAuthentication", "legacy/default"): ["MESH-MTLS-002"],
}


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EmulatorThread, Path]]:
    with audit_cluster("v1") as emu:
        load(emu, MAIN_OBJECTS)
        yield emu, emu.kubeconfig(tmp_path_factory.mktemp("kube") / "config")


def audit_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = run_in_process("audit", "cluster", "--format", "json", *argv)
    return code, json.loads(capsys.readouterr().out)


def by_object(doc: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    return {(o["kind"], o["ref"]): o["rules"] for o in doc["objects"]}


def test_reports_rule_ids_per_object(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = cluster
    code, doc = audit_json(capsys, "--kubeconfig", str(kubeconfig))
    assert code == 1
    assert by_object(doc) == EXPECTED


def test_json_schema(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = cluster
    _, doc = audit_json(capsys, "--kubeconfig", str(kubeconfig), "--context", "emu")
    assert set(doc) == {"compliant", "scanned", "peer_authentication", "objects",
                        "violations_by_rule"}  # fmt: skip
    assert doc["compliant"] is False
    assert doc["scanned"] == {
        "Pod": 7,
        "Namespace": 4,
        "StorageClass": 2,
        "PeerAuthentication": 3,
    }
    assert doc["peer_authentication"] == {
        "installed": True,
        "api_version": "security.istio.io/v1",
    }
    for obj in doc["objects"]:
        assert set(obj) == {"kind", "namespace", "name", "ref", "rules", "violations"}
        assert obj["rules"] == sorted({v["rule"] for v in obj["violations"]})
        assert all(set(v) == {"rule", "message"} for v in obj["violations"])
        assert obj["ref"] == (f"{obj['namespace']}/{obj['name']}" if obj["namespace"]
                              else obj["name"])  # fmt: skip
    assert doc["violations_by_rule"] == {rule: 1 for rules in EXPECTED.values() for rule in rules}


def test_text_output(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = cluster
    assert run_in_process("audit", "cluster", "--kubeconfig", str(kubeconfig)) == 1
    out = capsys.readouterr().out
    assert "7 pods, 4 namespaces, 2 storageclasses, 3 peerauthentications" in out
    for (kind, ref), rules in EXPECTED.items():
        line = next(ln for ln in out.splitlines() if f" {ref}:" in ln and kind in ln)
        assert line.split(": ", 1)[1] == ", ".join(rules)
    assert "team-a/compliant" not in out and "mpi-jobs/allreduce" not in out


def test_textfile(cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = cluster
    prom = tmp_path / "policy.prom"
    assert run_in_process("audit", "cluster", "--kubeconfig", str(kubeconfig),
                   "--textfile", str(prom)) == 1  # fmt: skip
    capsys.readouterr()
    samples = {
        (s.labels["policy"], s.labels["rule"]): s.value
        for family in text_string_to_metric_families(prom.read_text())
        if family.name == "gotthard_policy_violations"
        for s in family.samples
    }
    rules = {(r["policy"], r["id"]) for r in testing.load_rules()}
    assert set(samples) == rules  # one series per rule, zeros included
    fired = {rule for rules_ in EXPECTED.values() for rule in rules_}
    for (_policy, rule), value in samples.items():
        assert value == (1.0 if rule in fired else 0.0), rule


def test_live_labels_replace_inventory_labels(
    cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--data that labels team-a for MPI is overridden by the live (unlabelled) Namespace;
    a namespace that only --data knows keeps its inventory entry."""
    _, kubeconfig = cluster
    data = tmp_path / "data.yml"
    data.write_text(
        yaml.safe_dump(
            {"inventory": {"namespaces": {"team-a": {"labels": {"gotthard.io/network": "mpi"}}}}}
        )
    )
    code, doc = audit_json(capsys, "--kubeconfig", str(kubeconfig), "--data", str(data))
    assert code == 1
    assert by_object(doc)[("Pod", "team-a/hostnet")] == ["POD-HOSTNET-001"]


def test_opa_engine_agrees(
    cluster: Any, opa_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = cluster
    code, doc = audit_json(
        capsys,
        "--kubeconfig",
        str(kubeconfig),
        "--engine",
        "opa",
        "--opa-url",
        opa_server.url,
    )
    assert code == 1
    assert by_object(doc) == EXPECTED


def test_compliant_cluster_with_v1beta1_istio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with audit_cluster("v1beta1") as emu:
        load(
            emu,
            [
                namespace("team-b"),
                pod("team-b", "web"),
                storage_class("lustre-home", {"rootSquash": "true"}),
                peer_auth("team-b", "STRICT", version="v1beta1"),
            ],
        )
        kubeconfig = emu.kubeconfig(tmp_path / "config")
        code, doc = audit_json(capsys, "--kubeconfig", str(kubeconfig))
        assert code == 0
        assert doc["compliant"] is True and doc["objects"] == []
        assert doc["peer_authentication"]["api_version"] == "security.istio.io/v1beta1"
        assert run_in_process("audit", "cluster", "--kubeconfig", str(kubeconfig)) == 0
        assert "compliant: no violations" in capsys.readouterr().out


def test_istio_not_installed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with audit_cluster() as emu:
        load(emu, [namespace("team-c"), pod("team-c", "web")])
        kubeconfig = emu.kubeconfig(tmp_path / "config")
        code, doc = audit_json(capsys, "--kubeconfig", str(kubeconfig))
        # no mesh: the workload namespace has no STRICT mTLS
        assert code == 1
        assert doc["peer_authentication"] == {"installed": False, "api_version": None}
        assert by_object(doc) == {("Namespace", "team-c"): ["MESH-MTLS-001"]}
        assert run_in_process("audit", "cluster", "--kubeconfig", str(kubeconfig)) == 1
        assert "peerauthentications: not installed" in capsys.readouterr().out


# --- errors: exit 2 with a clear message ---------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_api_down(cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emu, _ = cluster
    url = f"http://127.0.0.1:{_closed_port()}"
    kubeconfig = emu.kubeconfig(tmp_path / "config", server=url)
    assert run_in_process("audit", "cluster", "--kubeconfig", str(kubeconfig)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"cannot reach the Kubernetes API at {url}" in captured.err


def test_api_forbidden(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    emu, kubeconfig = cluster
    emu.fault("GET", "/apis/storage.k8s.io/v1/storageclasses", status=403, times=None)
    try:
        assert run_in_process("audit", "cluster", "--kubeconfig", str(kubeconfig)) == 2
    finally:
        emu.clear_faults()
    err = capsys.readouterr().err
    assert "listing storageclasses" in err and "403" in err and "RBAC" in err


@pytest.mark.parametrize(
    ("content", "context", "expected"),
    [
        (None, None, "no such file"),
        ("{not: [yaml", None, "kubeconfig"),
        ("apiVersion: v1\nkind: Config\n", None, "kubeconfig"),
        ("VALID", "nope", "nope"),
    ],
    ids=["missing", "not-yaml", "no-context", "unknown-context"],
)
def test_bad_kubeconfig(
    cluster: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    context: str | None,
    expected: str,
) -> None:
    emu, _ = cluster
    path = tmp_path / "config"
    if content == "VALID":
        emu.kubeconfig(path)
    elif content is not None:
        path.write_text(content)
    argv = ["audit", "cluster", "--kubeconfig", str(path)]
    if context:
        argv += ["--context", context]
    assert run_in_process(*argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("gotthard audit cluster: ")
    assert expected in captured.err
    assert "Traceback" not in captured.err


# --- the Kubernetes CronJob: findings become metrics, not a failed Job -------------------

METRICS_CONFIGMAP = ("gotthard", "gotthard-audit-metrics")


def _configmap_samples(emu: EmulatorThread) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with emu.api() as api:
        data = client.CoreV1Api(api).read_namespaced_config_map(*reversed(METRICS_CONFIGMAP)).data
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(data["audit-cluster.prom"])
        for s in family.samples
    }


def test_report_only_puts_the_findings_into_the_configmap_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with EmulatorThread(PODS, STORAGE_CLASSES, CONFIGMAPS) as emu:
        load(emu, [namespace("team-a"), pod("team-a", "privileged", v=_privileged)])
        kubeconfig = emu.kubeconfig(tmp_path / "config")
        target = "/".join(METRICS_CONFIGMAP)
        argv = ["--kubeconfig", str(kubeconfig), "--textfile-configmap", target]
        # the ConfigMap the render declares; the audit never creates it
        assert run_in_process("audit", "cluster", *argv, "--report-only") == 2
        assert f"--textfile-configmap {target}: HTTP 404" in capsys.readouterr().err
        with emu.api() as api:
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": METRICS_CONFIGMAP[0]}})
            body = {"metadata": {"name": METRICS_CONFIGMAP[1]}, "data": {"other": "kept"}}
            core.create_namespaced_config_map(METRICS_CONFIGMAP[0], body)

        assert run_in_process("audit", "cluster", *argv, "--report-only") == 0
        assert "POD-PRIV-001" in capsys.readouterr().out
        samples = _configmap_samples(emu)
        violations = (
            "gotthard_policy_violations",
            (("policy", "pod"), ("rule", "POD-PRIV-001")),
        )
        assert samples[violations] == 1.0
        written = (
            "gotthard_audit_last_run_timestamp_seconds",
            (("textfile", "audit-cluster.prom"),),
        )
        assert samples[written] > 0
        with emu.api() as api:
            kept = client.CoreV1Api(api).read_namespaced_config_map(*reversed(METRICS_CONFIGMAP))
        assert kept.data["other"] == "kept"

        # without --report-only the same finding is exit 1, as on a terminal
        assert run_in_process("audit", "cluster", *argv) == 1
        capsys.readouterr()
