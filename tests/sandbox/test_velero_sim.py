"""The simulated Velero over two emulated clusters, as the DR code and a user see it.

Zurich and Lugano are two emulated API servers sharing one object-store directory. A
backup taken in Zurich is synced into Lugano and restores there into the mapped
namespace; backup hooks run around the backup in spec order, and fail the way Velero
reports them (``PartiallyFailed``, ``status.hookStatus``); a restore's post hook runs on
the restored pod. The last test runs the parts as the sandbox does: two
``gotthard_testing.kubeapi`` processes and one ``gotthard_testing.velero_sim`` process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gotthard.kube import client_for
from gotthard.site import KubeAccess
from gotthard_testing.kubeapi import sandbox_resources
from gotthard_testing.velero_sim import SimulatedVelero
from tests.support.kube import (
    EmulatorThread,
    assert_stops_cleanly,
    assert_usage_error,
    create_pod,
    deployment_manifest,
    pod_manifest,
    start_kubeapi,
)
from tests.support.monitoring import Processes
from tests.support.wait import wait_until

VELERO = ("velero.io", "v1", "velero")
VELERO_SIM = (sys.executable, "-m", "gotthard_testing.velero_sim")
#: The application's pods: the database (two containers) and a web pod no hook selects.
DB_LABELS = {"matchLabels": {"app": "db"}}


class Sites:
    """Two emulated clusters, their clients and the simulated Velero over both."""

    def __init__(self, store: Path) -> None:
        self.k8s = {
            name: EmulatorThread(*sandbox_resources("kubernetes")).start()
            for name in ("zurich", "lugano")
        }
        self.api = {name: k8s.api() for name, k8s in self.k8s.items()}
        self.store = store
        self.velero = SimulatedVelero(self.api, store).start()

    def stop(self) -> None:
        self.velero.stop()
        for k8s in reversed(self.k8s.values()):  # kmock: last started, first stopped
            k8s.stop()


@pytest.fixture
def sites(tmp_path: Path) -> Iterator[Sites]:
    both = Sites(tmp_path / "store")
    try:
        yield both
    finally:
        both.stop()


def seed(api: client.ApiClient, namespace: str = "prod", db_phase: str = "Running") -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(namespace, deployment_manifest("web", namespace, 2))
    create_pod(api, pod_manifest("db-0", namespace, ("mariadb", "sidecar"), app="db"), db_phase)
    create_pod(api, pod_manifest("web-0", namespace), "Running")


def exec_hook(command: str, container: str = "mariadb", on_error: str = "") -> dict[str, Any]:
    hook: dict[str, Any] = {"container": container, "command": ["/bin/sh", "-c", command]}
    if on_error:
        hook["onError"] = on_error
    return {"exec": hook}


def create(api: client.ApiClient, kind: str, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": "velero.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "velero"},
        "spec": spec,
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(*VELERO, f"{kind.lower()}s", body)


def get(api: client.ApiClient, plural: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            *VELERO, plural, name
        )
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def finished(
    api: client.ApiClient, plural: str, name: str, what: Callable[[], str] | None = None
) -> dict[str, Any]:
    """The object once it left New and InProgress (*what*: more to say on a timeout)."""

    def done() -> dict[str, Any] | None:
        obj = get(api, plural, name)
        phase = ((obj or {}).get("status") or {}).get("phase", "")
        return obj if phase not in ("", "New", "InProgress") else None

    about = f"{plural}/{name} to finish"
    return wait_until(done, 30, lambda: f"{about}\n{what() if what else ''}")


def backup(sites: Sites, name: str, hooks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"includedNamespaces": ["prod"]}
    if hooks is not None:
        spec["hooks"] = {"resources": hooks}
    create(sites.api["zurich"], "Backup", name, spec)
    return finished(sites.api["zurich"], "backups", name)


def names(api: client.ApiClient, namespace: str) -> tuple[list[str], list[str]]:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    deployments = sorted(d.metadata.name for d in apps.list_namespaced_deployment(namespace).items)
    pods = sorted(p.metadata.name for p in core.list_namespaced_pod(namespace).items)
    return deployments, pods


def test_a_backup_in_zurich_is_synced_to_lugano_and_restores_there(sites: Sites) -> None:
    seed(sites.api["zurich"])
    done = backup(sites, "nightly")
    assert done["status"]["phase"] == "Completed"
    assert "hookStatus" not in done["status"]  # no hooks, none reported
    stored = sites.store / "backups" / "nightly"
    assert json.loads((stored / "velero-backup.json").read_text())["metadata"]["name"] == "nightly"
    assert (stored / "resources/deployments.apps/namespaces/prod/web.json").is_file()
    assert (stored / "resources/pods/namespaces/prod/db-0.json").is_file()

    lugano = sites.api["lugano"]
    for api in sites.api.values():
        location = get(api, "backupstoragelocations", "default")
        assert location and location["status"]["phase"] == "Available"
        assert location["spec"]["objectStorage"]["bucket"] == str(sites.store)
    synced = wait_until(lambda: get(lugano, "backups", "nightly"), 5, "the backup sync")
    assert synced["status"]["phase"] == "Completed"
    assert synced["spec"]["includedNamespaces"] == ["prod"]
    assert names(lugano, "prod") == ([], [])  # synced is not restored

    spec = {
        "backupName": "nightly",
        "includedNamespaces": ["prod"],
        "namespaceMapping": {"prod": "drill-prod"},
    }
    create(lugano, "Restore", "drill-1", spec)
    assert finished(lugano, "restores", "drill-1")["status"]["phase"] == "Completed"
    assert names(lugano, "drill-prod") == (["web"], ["db-0", "web-0"])
    restored = client.AppsV1Api(lugano).read_namespaced_deployment("web", "drill-prod")
    assert restored.spec.replicas == 2
    # the simulated Deployment controller reports status on its next pass, as a real one does
    wait_until(lambda: ready_replicas(lugano, "drill-prod", "web") == 2, 10, "web ready")
    pod = client.CoreV1Api(lugano).read_namespaced_pod("db-0", "drill-prod")
    assert pod.status.phase == "Running"
    assert [c.name for c in pod.spec.containers] == ["mariadb", "sidecar"]
    assert names(sites.api["zurich"], "drill-prod") == ([], [])  # Zurich untouched


def test_pre_and_post_hooks_run_in_spec_order_around_the_backup(sites: Sites) -> None:
    seed(sites.api["zurich"])
    hooks = [
        {
            "name": "freeze",
            "includedNamespaces": ["prod"],
            "labelSelector": DB_LABELS,
            "pre": [exec_hook("flush"), exec_hook("lock", "sidecar")],
            "post": [exec_hook("unlock")],
        },
        {"name": "elsewhere", "includedNamespaces": ["other"], "pre": [exec_hook("never")]},
    ]
    done = backup(sites, "consistent", hooks)
    assert done["status"]["phase"] == "Completed"
    assert done["status"]["hookStatus"] == {"hooksAttempted": 3, "hooksFailed": 0}
    log = sites.velero.hook_log("Backup", "consistent")
    assert [(e["phase"], e["hook"], e["pod"], e["container"]) for e in log] == [
        ("pre", "freeze", "db-0", "mariadb"),
        ("pre", "freeze", "db-0", "sidecar"),
        ("post", "freeze", "db-0", "mariadb"),
    ]
    assert log[0]["command"] == ["/bin/sh", "-c", "flush"]
    assert all(e["ok"] and e["error"] == "" for e in log)
    written = (sites.store / "hooks" / "backup-consistent.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in written] == log


@pytest.mark.parametrize(
    ("on_error", "ran", "attempted"),
    [("Fail", ["pre"], 1), ("Continue", ["pre", "pre", "post"], 3)],
)
def test_a_failing_pre_hook_leaves_the_backup_partially_failed(
    sites: Sites, on_error: str, ran: list[str], attempted: int
) -> None:
    seed(sites.api["zurich"])
    hooks = [
        {
            "name": "freeze",
            "includedNamespaces": ["prod"],
            "labelSelector": DB_LABELS,
            "pre": [exec_hook("flush", "postgres", on_error), exec_hook("lock")],
            "post": [exec_hook("unlock")],
        }
    ]
    done = backup(sites, "broken", hooks)
    assert done["status"]["phase"] == "PartiallyFailed"
    assert done["status"]["hookStatus"] == {"hooksAttempted": attempted, "hooksFailed": 1}
    log = sites.velero.hook_log("Backup", "broken")
    assert [e["phase"] for e in log] == ran
    assert not log[0]["ok"] and "postgres" in log[0]["error"]
    assert all(e["ok"] for e in log[1:])
    # a PartiallyFailed backup is in the store and synced, as Velero uploads it
    assert wait_until(lambda: get(sites.api["lugano"], "backups", "broken"), 5, "the sync")


def test_a_hook_on_a_pod_that_is_not_running_fails(sites: Sites) -> None:
    seed(sites.api["zurich"], db_phase="Pending")
    hooks = [{"name": "freeze", "labelSelector": DB_LABELS, "pre": [exec_hook("flush")]}]
    done = backup(sites, "pending", hooks)
    assert done["status"]["phase"] == "PartiallyFailed"
    [entry] = sites.velero.hook_log("Backup", "pending")
    assert not entry["ok"] and "not running" in entry["error"]


def test_a_restore_post_hook_runs_on_the_restored_pod(sites: Sites) -> None:
    seed(sites.api["zurich"])
    assert backup(sites, "nightly")["status"]["phase"] == "Completed"
    lugano = sites.api["lugano"]
    wait_until(lambda: get(lugano, "backups", "nightly"), 5, "the backup sync")
    hooks = [
        {
            "name": "warm-cache",
            "includedNamespaces": ["drill-prod"],  # the target namespace, as in Velero
            "labelSelector": DB_LABELS,
            "postHooks": [exec_hook("warm")],
        }
    ]
    spec = {
        "backupName": "nightly",
        "namespaceMapping": {"prod": "drill-prod"},
        "hooks": {"resources": hooks},
    }
    create(lugano, "Restore", "with-hooks", spec)
    done = finished(lugano, "restores", "with-hooks")
    assert done["status"]["phase"] == "Completed"
    assert done["status"]["hookStatus"] == {"hooksAttempted": 1, "hooksFailed": 0}
    [entry] = sites.velero.hook_log("Restore", "with-hooks")
    assert (entry["phase"], entry["namespace"], entry["pod"]) == ("post", "drill-prod", "db-0")
    assert entry["ok"] and entry["command"] == ["/bin/sh", "-c", "warm"]


def ready_replicas(api: client.ApiClient, namespace: str, name: str) -> int:
    status = client.AppsV1Api(api).read_namespaced_deployment(name, namespace).status
    return (status.ready_replicas or 0) if status else 0


def test_restored_deployments_turn_ready_after_the_ready_delay(sites: Sites) -> None:
    """The simulated Deployment controller reports a seeded Deployment ready at once and a
    restored one only *ready_delay* after it appeared (its clock here is the test's)."""
    now = [0.0]
    controller = sites.velero.deployments
    controller.clock, controller.ready_delay = (lambda: now[0]), 30.0
    zurich, lugano = sites.api["zurich"], sites.api["lugano"]
    seed(zurich)
    wait_until(lambda: ready_replicas(zurich, "prod", "web") == 2, 10, "web ready in Zurich")
    backup(sites, "nightly")
    wait_until(lambda: get(lugano, "backups", "nightly"), 5, "the backup sync")
    create(lugano, "Restore", "slow", {"backupName": "nightly", "namespaceMapping": {"prod": "dr"}})
    assert finished(lugano, "restores", "slow")["status"]["phase"] == "Completed"
    restored = client.AppsV1Api(lugano).read_namespaced_deployment("web", "dr")
    assert restored.metadata.labels["velero.io/restore-name"] == "slow"
    assert restored.metadata.labels["velero.io/backup-name"] == "nightly"
    # a Deployment created after the restore is ready: the controller has passed over
    # the restored one since, and left it unready while its clock stood still
    client.AppsV1Api(lugano).create_namespaced_deployment("dr", deployment_manifest("probe", "dr"))
    wait_until(lambda: ready_replicas(lugano, "dr", "probe") == 1, 10, "probe ready")
    assert ready_replicas(lugano, "dr", "web") == 0
    now[0] = 30.0
    wait_until(lambda: ready_replicas(lugano, "dr", "web") == 2, 10, "restored web ready")


def test_the_standalone_processes_restore_a_zurich_backup_in_lugano(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Processes(tmp_path / "logs") as procs:
        argv = [*VELERO_SIM, "--object-store", str(store)]
        api = {}
        for name in ("zurich", "lugano"):
            _, _, kubeconfig = start_kubeapi(procs, tmp_path, name)
            argv += ["--cluster", f"{name}={kubeconfig}"]
            api[name] = client_for(KubeAccess(kubeconfig=str(kubeconfig)), name)
        velero = procs.start("velero", argv)
        seed(api["zurich"])
        create(api["zurich"], "Backup", "nightly", {"includedNamespaces": ["prod"]})
        assert (
            finished(api["zurich"], "backups", "nightly", procs.read_logs)["status"]["phase"]
            == "Completed"
        )
        wait_until(lambda: get(api["lugano"], "backups", "nightly"), 10, procs.read_logs)
        spec = {"backupName": "nightly", "namespaceMapping": {"prod": "drill-prod"}}
        create(api["lugano"], "Restore", "drill-1", spec)
        assert (
            finished(api["lugano"], "restores", "drill-1", procs.read_logs)["status"]["phase"]
            == "Completed"
        )
        assert names(api["lugano"], "drill-prod") == (["web"], ["db-0", "web-0"])
        assert (store / "backups" / "nightly" / "velero-backup.json").is_file()
        assert_stops_cleanly(velero)


@pytest.mark.parametrize(
    "args",
    [
        ["--cluster", "zurich", "--object-store", "STORE"],
        ["--cluster", "zurich=MISSING", "--object-store", "STORE"],
        ["--object-store", "STORE"],
        ["--cluster", "zurich=MISSING", "--object-store", "STORE", "--ready-delay", "-1"],
    ],
    ids=["no-kubeconfig", "missing-kubeconfig", "no-cluster", "negative-delay"],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str]) -> None:
    places = {"STORE": str(tmp_path / "store"), "MISSING": str(tmp_path / "missing")}
    argv = [places.get(a, a.replace("MISSING", places["MISSING"])) for a in args]
    assert_usage_error([*VELERO_SIM, *argv])
