"""Velero Schedules managed from ``[[dr.schedules]]`` and the BackupStorageLocation check,
both run when the daemon becomes leader."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from gotthard.dr import velero as v
from gotthard.dr.daemon import DrDaemon, bsl_job
from tests.support.kube import EmulatorThread
from tests.support.wait import wait_until

from .conftest import make_config
from .emulator import SimulatedVeleroController

SCHEDULES = [
    {"name": "daily", "namespaces": ["prod"], "cron": "0 2 * * *", "velero_schedule": True},
    {"name": "hourly", "namespaces": ["web"], "cron": "0 * * * *", "sites": ["zurich"]},
]


def create(k8s: EmulatorThread, plural: str, body: dict) -> None:
    client.CustomObjectsApi(k8s.api()).create_namespaced_custom_object(
        "velero.io", "v1", "velero", plural, body
    )


def schedules(k8s: EmulatorThread) -> dict[str, dict]:
    items = client.CustomObjectsApi(k8s.api()).list_namespaced_custom_object(
        "velero.io", "v1", "velero", "schedules"
    )["items"]
    return {i["metadata"]["name"]: i for i in items}


def bsl(name: str, phase: str) -> dict:
    return {
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": name, "namespace": "velero"},
        "spec": {"provider": "aws", "objectStorage": {"bucket": name}},
        "status": {"phase": phase},
    }


def test_leader_start_applies_velero_schedules_and_checks_bsl(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    create(k8s, "backupstoragelocations", bsl("default", "Available"))
    create(k8s, "backupstoragelocations", bsl("offsite", "Unavailable"))
    cfg = make_config(tmp_path, schedules=SCHEDULES, drills=[])
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    daemon = DrDaemon(cfg, api_clients=apis, identity="a")
    assert daemon.step(None)  # leader (no Lease): start-up chores, then the scheduler
    try:
        got = schedules(k8s)
        assert sorted(got) == ["daily-lugano", "daily-zurich"]
        zurich = got["daily-zurich"]
        assert zurich["spec"]["schedule"] == "0 2 * * *"
        assert zurich["spec"]["template"] == {"includedNamespaces": ["prod"], "ttl": "720h0m0s"}
        assert zurich["spec"]["paused"] is False
        assert zurich["metadata"]["labels"] == {
            v.LABEL_MANAGED: "gotthard",
            v.LABEL_SCHEDULE: "daily",
            v.LABEL_SITE: "zurich",
        }
        # Velero fires "daily" itself: the daemon adds no second Backup per slot for it
        assert daemon.scheduler is not None
        ids = sorted(j.id for j in daemon.scheduler.get_jobs())
        assert ids == ["backup:zurich:hourly", "bsl:lugano", "bsl:zurich", "follow:zurich"]

        reg = daemon.metrics.registry
        avail = "gotthard_dr_backup_storage_location_available"
        assert reg.get_sample_value(avail, {"site": "zurich", "location": "default"}) == 1
        assert reg.get_sample_value(avail, {"site": "zurich", "location": "offsite"}) == 0

        # A Backup fired by Velero's Schedule feeds last-success and RPO (bsl job)
        create(
            k8s,
            "backups",
            {
                "apiVersion": "velero.io/v1",
                "kind": "Backup",
                "metadata": {
                    "name": "daily-zurich-20260301020012",
                    "namespace": "velero",
                    "labels": {v.LABEL_VELERO_SCHEDULE: "daily-zurich"},
                },
                "spec": {"includedNamespaces": ["prod"]},
            },
        )
        api = v.Velero(k8s.api())
        wait_until(
            lambda: (
                v.phase_of(api.get("backups", "daily-zurich-20260301020012")) in v.TERMINAL_PHASES
            )
        )
        bsl_job("zurich")
        last = reg.get_sample_value(
            "gotthard_dr_backup_last_success_timestamp_seconds",
            {"site": "zurich", "schedule": "daily"},
        )
        assert last is not None and last > 0
        assert (
            reg.get_sample_value(
                "gotthard_dr_rpo_seconds", {"site": "zurich", "namespace": "prod", "tier": ""}
            )
            is not None
        )
    finally:
        daemon.stop_scheduler()

    # The configuration changes: new cron, Lugano dropped. A restart patches and prunes.
    changed = [dict(SCHEDULES[0], cron="30 3 * * 0", sites=["zurich"]), SCHEDULES[1]]
    restarted = DrDaemon(
        make_config(tmp_path, schedules=changed, drills=[]), api_clients=apis, identity="a"
    )
    assert restarted.sync_velero_schedules() == {
        "zurich": {"daily-zurich": "updated"},
        "lugano": {"daily-lugano": "deleted"},
    }
    got = schedules(k8s)
    assert sorted(got) == ["daily-zurich"]
    assert got["daily-zurich"]["spec"]["schedule"] == "30 3 * * 0"


def test_velero_schedule_failure_does_not_block_start(k8s: EmulatorThread, tmp_path: Path) -> None:
    cfg = make_config(
        tmp_path, schedules=SCHEDULES, drills=[], api_attempts=1, api_timeout_seconds=1
    )
    k8s.fault("POST", "/apis/velero.io/v1/namespaces/velero/schedules", status=500, times=2)
    daemon = DrDaemon(cfg, api_clients={"zurich": k8s.api(), "lugano": k8s.api()})
    try:
        assert daemon.step(None) and daemon.scheduler is not None
    finally:
        daemon.stop_scheduler()
