"""Backups, drills and API faults against the emulated API and the simulated Velero, and
drills that meet a slow restore (the simulated Deployment controller's ready delay)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from gotthard.dr import api, ops
from gotthard.dr import velero as v
from gotthard.dr.daemon import last_slot
from tests.support.kube import EmulatorThread, deployment_manifest

from .conftest import make_config
from .emulator import SimulatedVeleroController

SLOT = dt.datetime(2026, 3, 1, 2, 0, tzinfo=dt.UTC)


def seed_prod(k8s: EmulatorThread) -> None:
    apps = client.AppsV1Api(k8s.api())
    for name in ("web", "worker"):
        apps.create_namespaced_deployment("prod", deployment_manifest(name, "prod", 2))


def samples(ctx: ops.Context) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(ctx.metrics.render()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_scheduled_backup_spec_and_metrics(k8s, velero, cfg) -> None:
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    outcome = ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    assert outcome.name == "daily-zurich-20260301020000"
    obj = ctx.velero("zurich").get("backups", outcome.name)
    assert obj["spec"] == {"includedNamespaces": ["prod"], "ttl": "720h0m0s"}
    assert obj["metadata"]["labels"][v.LABEL_SCHEDULE] == "daily"
    got = samples(ctx)
    assert (
        got[
            (
                "gotthard_dr_backups_total",
                (("phase", "Completed"), ("schedule", "daily"), ("site", "zurich")),
            )
        ]
        == 1
    )
    assert (
        got[
            (
                "gotthard_dr_backup_last_success_timestamp_seconds",
                (("schedule", "daily"), ("site", "zurich")),
            )
        ]
        > 0
    )
    # an untiered namespace: tier="" (an absent label to Prometheus)
    rpo_labels = (("namespace", "prod"), ("site", "zurich"), ("tier", ""))
    assert ("gotthard_dr_rpo_seconds", rpo_labels) in got
    # the same slot again: 409, no second Backup
    ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    assert len(ctx.velero("zurich").list("backups")) == 1


@pytest.mark.parametrize("phase", ["PartiallyFailed", "Failed", "FailedValidation"])
def test_unusable_backup_phases(k8s, velero, cfg, phase) -> None:
    velero.outcome = lambda kind, name: phase
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    with pytest.raises(RuntimeError, match=phase):
        ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    key = (
        "gotthard_dr_backups_total",
        (("phase", phase), ("schedule", "daily"), ("site", "zurich")),
    )
    assert samples(ctx)[key] == 1


def test_stuck_backup_times_out(k8s, velero, tmp_path) -> None:
    cfg = make_config(tmp_path, backup_timeout_seconds=0.3)
    velero.outcome = lambda kind, name: "stuck"
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    with pytest.raises(v.PhaseTimeout, match="InProgress"):
        ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)


def test_drill_end_to_end(k8s, velero, cfg) -> None:
    seed_prod(k8s)
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    time.sleep(1.0)  # RPO is measured in whole seconds (Velero timestamps)
    report = ops.run_drill(ctx, cfg.dr.drills[0])
    assert report.verified, report.error
    assert report.backup == "daily-zurich-20260301020000"
    assert report.scratch_namespace.startswith("drill-prod-")
    restore = ctx.velero("zurich").get("restores", report.restore)
    assert restore["spec"]["namespaceMapping"] == {"prod": report.scratch_namespace}
    assert report.rto_seconds is not None and report.rto_seconds > 0
    assert report.rpo_seconds is not None and report.rpo_seconds >= 1
    assert report.cleaned and report.scratch_namespace not in k8s.emulator.namespaces
    assert [c["name"] for c in report.checks] == [
        "backup-completed",
        "restore-completed",
        "deployments.apps/v1",
    ]
    got = samples(ctx)
    labels = (("namespace", "prod"), ("site", "zurich"))
    assert got[("gotthard_dr_drill_last_success", labels)] == 1
    assert got[("gotthard_dr_drill_rto_seconds", labels)] == pytest.approx(report.rto_seconds)
    assert got[("gotthard_dr_drill_rpo_seconds", labels)] == pytest.approx(report.rpo_seconds)
    assert got[("gotthard_dr_drill_last_timestamp_seconds", labels)] > 0
    assert '"verified": true' in report.to_json()
    assert "verified" in report.to_markdown()


def test_failed_drill_restore_partially_failed(k8s, velero, cfg) -> None:
    seed_prod(k8s)
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    velero.outcome = lambda kind, name: "PartiallyFailed" if kind == "Restore" else "Completed"
    report = ops.run_drill(ctx, cfg.dr.drills[0])
    assert not report.verified and report.rto_seconds is None
    assert "restore-completed: PartiallyFailed" in report.error
    assert report.cleaned and not k8s.emulator.namespaces
    assert (
        samples(ctx)[
            ("gotthard_dr_drill_last_success", (("namespace", "prod"), ("site", "zurich")))
        ]
        == 0
    )


def test_failed_drill_without_backup(k8s, velero, cfg) -> None:
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    report = ops.run_drill(ctx, cfg.dr.drills[0])
    assert not report.verified and "no Completed backup" in report.error


def test_api_500s_and_timeouts_are_retried(k8s, velero, cfg) -> None:
    retried: list[str] = []
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    ctx.retry.on_retry = retried.append
    ctx.retry.timeout_seconds = 0.3
    k8s.fault("POST", "/apis/velero.io/v1/namespaces/velero/backups", status=500, times=2)
    k8s.fault("GET", "/apis/velero.io/v1/namespaces/velero/backups/", status=0, delay=1.0)
    outcome = ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    assert outcome.usable
    assert retried.count("create backups") == 2 and "get backups" in retried
    assert len(ctx.velero("zurich").list("backups")) == 1


def test_api_faults_exhausted_raise_not_hang(k8s, cfg) -> None:
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    k8s.fault("POST", "/apis/velero.io/v1/namespaces/velero/backups", status=503, times=10)
    with pytest.raises(client.ApiException) as err:
        ops.trigger_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    assert err.value.status == 503


def test_public_api_backup_now(k8s, cfg) -> None:
    name = api.backup_now(cfg, "prod", reason="runbook DRBackupTooOld", api_client=k8s.api())
    assert name.startswith("manual-prod-zurich-")
    obj = client.CustomObjectsApi(k8s.api()).get_namespaced_custom_object(
        "velero.io", "v1", "velero", "backups", name
    )
    assert obj["spec"]["includedNamespaces"] == ["prod"]
    assert obj["metadata"]["labels"]["gotthard.io/reason"] == "runbook-DRBackupTooOld"


def test_last_slot() -> None:
    now = dt.datetime(2026, 3, 1, 2, 30, tzinfo=dt.UTC)
    assert last_slot("0 2 * * *", "UTC", now) == SLOT
    assert last_slot("*/15 * * * *", "UTC", now) == dt.datetime(2026, 3, 1, 2, 30, tzinfo=dt.UTC)
    assert last_slot("0 4 * * 0", "UTC", now).weekday() == 6


# -- a slow restore: the restored Deployments turn ready only after a while ----------------


@pytest.fixture
def slow_velero(k8s, request) -> Iterator[SimulatedVeleroController]:
    """The simulated Velero whose Deployment controller makes restored Deployments ready
    ``request.param`` seconds after they appear."""
    ctl = SimulatedVeleroController(k8s.api(), ready_delay=request.param).start()
    yield ctl
    ctl.stop()


@pytest.mark.parametrize("slow_velero", [1.0], indirect=True)
def test_a_drill_waits_for_a_slow_restore_to_become_ready(k8s, slow_velero, cfg) -> None:
    seed_prod(k8s)
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    report = ops.run_drill(ctx, cfg.dr.drills[0])
    assert report.verified, report.error
    restore, verify = report.phases[1:3]
    assert verify["ok"] and verify["detail"] == "passed: deployments.apps/v1"
    # the Deployments appeared during the restore and were ready a second later at the
    # earliest: the drill waited for them
    assert restore["duration_seconds"] + verify["duration_seconds"] >= 1.0
    assert report.checks[-1]["detail"] == "2 found (min 1), 2 ready"


@pytest.mark.parametrize("slow_velero", [3600.0], indirect=True)
def test_a_restore_not_ready_within_the_restore_timeout_fails_the_verify_phase(
    k8s, slow_velero, tmp_path
) -> None:
    cfg = make_config(tmp_path, restore_timeout_seconds=1.5)
    seed_prod(k8s)
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    report = ops.run_drill(ctx, cfg.dr.drills[0])
    assert not report.verified and report.rto_seconds is None
    assert [(p["name"], p["ok"]) for p in report.phases] == [
        ("backup", True),
        ("restore", True),
        ("verify", False),
        ("cleanup", True),
    ]
    verify = report.phases[2]
    assert verify["detail"] == "failed: deployments.apps/v1"
    assert verify["duration_seconds"] >= 1.5
    assert report.error == "deployments.apps/v1: 2 found (min 1), 0 ready"
    assert report.cleaned
    labels = (("namespace", "prod"), ("site", "zurich"))
    assert samples(ctx)[("gotthard_dr_drill_last_success", labels)] == 0
