"""Kubernetes and DR actions against the emulated Kubernetes API (gotthard_testing) over real HTTP,
driven through the webhook in enforce mode."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gotthard.config import Config
from gotthard.runbooks.actions import CORDON_ANNOTATION, DrActions, KubernetesActions
from tests.runbooks.conftest import (
    RepairFeed,
    Running,
    alert_payload,
    settings_for,
    with_repair_query,
)
from tests.support.kube import CRD_DIR, NODES, EmulatorThread, crd_resources


@pytest.fixture
def kube(kube_emulator: Callable[..., EmulatorThread]) -> EmulatorThread:
    """Nodes gpu01 and gpu02, and Velero Backups."""
    emulator = kube_emulator(NODES, *crd_resources(CRD_DIR / "velero.io_backups.yaml"))
    core = client.CoreV1Api(emulator.api())
    for name in ("gpu01", "gpu02"):
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    return emulator


def enforcing(
    tmp_path: Path, fake_slurm: Any, start_server: Any, kube: EmulatorThread, prometheus: str = ""
) -> Running:
    """The webhook in enforce mode with Kubernetes actions on the emulator and repairs
    confirmed by the Prometheus at *prometheus*; 10 GPU nodes."""
    settings = settings_for(tmp_path, fake_slurm, mode="enforce", prometheus_url=prometheus)
    running = start_server(settings, kubernetes=KubernetesActions(settings, api_client=kube.api()))
    fake_slurm.set_nodes({"gpu": [f"gpu{i:02d}" for i in range(1, 11)]})
    return running


def _node(kube: EmulatorThread, name: str) -> dict[str, Any]:
    api = client.CoreV1Api(kube.api())
    return api.api_client.sanitize_for_serialization(api.read_node(name))


def test_cordon_on_firing_and_uncordon_only_on_repair(
    tmp_path: Path,
    fake_slurm: Any,
    start_server: Any,
    kube: EmulatorThread,
    repair_feed: RepairFeed,
) -> None:
    running = enforcing(tmp_path, fake_slurm, start_server, kube, repair_feed.url)
    code, answer = running.post(alert_payload("GPULost", node="gpu01"))
    assert code == 200 and answer["results"] == {"ok": 3}, running.audit()
    node = _node(kube, "gpu01")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][CORDON_ANNOTATION] == "GPULost"
    assert not (_node(kube, "gpu02").get("spec") or {}).get("unschedulable")
    # Repeated notification: no second action.
    assert running.post(alert_payload("GPULost", node="gpu01"))[1]["results"] == {"duplicate": 3}

    # The GPU's series went stale (say, the exporter restarted): the node stays cordoned.
    repair_feed.health("gpu01", None)
    resolved = with_repair_query(alert_payload("GPULost", status="resolved", node="gpu01"))
    assert running.post(resolved)[1]["results"] == {"not-repaired": 2}
    assert _node(kube, "gpu01")["spec"]["unschedulable"] is True
    assert fake_slurm.state()["nodes"]["gpu01"]["state"] == "drained"
    # The GPU reports healthy: resumed and uncordoned.
    repair_feed.health("gpu01", 1)
    assert running.post(resolved)[1]["results"] == {"ok": 2}
    node = _node(kube, "gpu01")
    assert not (node.get("spec") or {}).get("unschedulable")
    assert CORDON_ANNOTATION not in ((node.get("metadata") or {}).get("annotations") or {})


def test_uncordon_leaves_a_node_cordoned_by_someone_else(
    tmp_path: Path, fake_slurm: Any, start_server: Any, kube: EmulatorThread
) -> None:
    client.CoreV1Api(kube.api()).patch_node(
        "gpu02", {"spec": {"unschedulable": True}}, _content_type="application/merge-patch+json"
    )
    settings = settings_for(tmp_path, fake_slurm, mode="enforce")
    actions = KubernetesActions(settings, api_client=kube.api())
    assert actions.cordon("gpu02", "GPULost").result == "noop"
    assert actions.uncordon("gpu02", "GPULost").result == "skipped"
    assert _node(kube, "gpu02")["spec"]["unschedulable"] is True


def test_unknown_node_is_a_reported_failure(
    tmp_path: Path, fake_slurm: Any, start_server: Any, kube: EmulatorThread
) -> None:
    running = enforcing(tmp_path, fake_slurm, start_server, kube)
    code, answer = running.post(alert_payload("GPULost", node="gpu09"))
    assert code == 200 and answer["results"] == {"ok": 2, "failed": 1}
    failed = next(r for r in running.audit() if r["result"] == "failed")
    assert failed["action"] == "k8s.cordon_node" and "HTTP 404" in failed["why"]


def test_backup_now_creates_a_velero_backup_through_the_dr_api(
    tmp_path: Path, fake_slurm: Any, start_server: Any, kube: EmulatorThread
) -> None:
    settings = settings_for(tmp_path, fake_slurm, mode="enforce")
    dr = DrActions(Config(), api_client=kube.api())
    running = start_server(settings, dr=dr)
    payload = alert_payload("DRBackupTooOld", namespace="billing", severity="warning")
    code, answer = running.post(payload)
    assert code == 200 and answer["results"] == {"ok": 2}, running.audit()
    api = client.CustomObjectsApi(kube.api())
    backups = api.list_namespaced_custom_object("velero.io", "v1", "velero", "backups")["items"]
    assert len(backups) == 1
    backup = backups[0]
    assert backup["metadata"]["name"].startswith("manual-billing-")
    assert backup["spec"]["includedNamespaces"] == ["billing"]
    record = next(r for r in running.audit() if r["action"] == "dr.backup_now")
    assert backup["metadata"]["name"] in record["why"]
    # Duplicate notification: still one Backup.
    assert running.post(payload)[1]["results"] == {"duplicate": 2}
    assert (
        len(api.list_namespaced_custom_object("velero.io", "v1", "velero", "backups")["items"]) == 1
    )
