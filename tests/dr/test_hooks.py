"""Velero backup and restore hooks: the site file's keys, the Velero objects they become
(checked against Velero's CRD schemas), and how a failing hook ends a backup.

The objects go through the emulated API server; the simulated Velero
(:mod:`gotthard_testing.velero_sim`) "runs" the hooks against the emulated Pods and logs
them. It is not Velero: nothing is executed, a hook fails where Velero's would (no such
container, pod not Running).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from kubernetes import client

from gotthard import config
from gotthard.config import Config
from gotthard.dr import api, ops
from gotthard.dr import velero as v
from gotthard_testing.resources import CRD_DIR, crd_resources, crd_validator
from gotthard_testing.velero_sim import SimulatedVelero
from tests.support.kube import (
    EmulatorThread,
    create_pod,
    deployment_manifest,
    pod_manifest,
    sandbox_resources,
)

from .conftest import make_config, with_dr
from .test_velero_drill import samples

SLOT = dt.datetime(2026, 3, 1, 2, 0, tzinfo=dt.UTC)

#: ``[[dr.schedules.hooks]]`` of the tests: freeze the database pods' file system.
FREEZE: dict[str, Any] = {
    "name": "freeze-db",
    "label_selector": {"app": "db"},
    "pre": [{"container": "db", "command": ["/sbin/fsfreeze", "--freeze", "/data"]}],
    "post": [
        {
            "container": "db",
            "command": ["/sbin/fsfreeze", "--unfreeze", "/data"],
            "on_error": "Continue",
            "timeout_seconds": 60,
        }
    ],
}
#: Its Velero form (``spec.hooks`` of the Backup and of the Schedule's template).
FREEZE_SPEC: dict[str, Any] = {
    "resources": [
        {
            "name": "freeze-db",
            "includedNamespaces": ["prod"],
            "labelSelector": {"matchLabels": {"app": "db"}},
            "pre": [
                {
                    "exec": {
                        "container": "db",
                        "command": ["/sbin/fsfreeze", "--freeze", "/data"],
                        "onError": "Fail",
                        "timeout": "30s",
                    }
                }
            ],
            "post": [
                {
                    "exec": {
                        "container": "db",
                        "command": ["/sbin/fsfreeze", "--unfreeze", "/data"],
                        "onError": "Continue",
                        "timeout": "60s",
                    }
                }
            ],
        }
    ]
}
#: ``[[dr.drills.restore_hooks]]``: a readiness command in the restored database pods.
READY: dict[str, Any] = {
    "name": "db-ready",
    "label_selector": {"app": "db"},
    "post_hooks": [{"container": "db", "command": ["pg_isready"], "wait_timeout_seconds": 120}],
}


# -- helpers shared with test_drill_phases ----------------------------------------------


def velero_validator(kind: str) -> jsonschema.Draft202012Validator:
    """The openAPIV3Schema of Velero's CRD for *kind*, strict (``fieldValidation=Strict``):
    a field the schema does not name (a misspelled key) is an error here, since the API
    server would silently drop it."""
    (resource,) = crd_resources(CRD_DIR / f"velero.io_{kind.lower()}s.yaml")
    validator: jsonschema.Draft202012Validator = crd_validator(resource, strict=True)
    return validator


def assert_valid(kind: str, obj: dict[str, Any]) -> None:
    errors = [e.message for e in velero_validator(kind).iter_errors(obj)]
    assert errors == [], f"{kind} does not match Velero's CRD: {errors}"


def seed_app(k8s: EmulatorThread, namespace: str = "prod", *, db_container: str = "db") -> None:
    """A Deployment ``web`` (2 replicas) and two database Pods (``app=db``) in *namespace*;
    ``db-1``'s container is *db_container* (another name makes the hooks fail there)."""
    api = k8s.api()
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace, deployment_manifest("web", namespace, 2)
    )
    for name, container in (("db-0", "db"), ("db-1", db_container)):
        pod = pod_manifest(name, namespace, (container,), "postgres:16", app="db")
        create_pod(api, pod, "Running")


@pytest.fixture
def cluster(kube_emulator: Callable[..., EmulatorThread]) -> EmulatorThread:
    """One emulated cluster serving Velero's CRDs, workloads and Pods."""
    return kube_emulator(*sandbox_resources("kubernetes"))


@pytest.fixture
def sim(cluster: EmulatorThread, tmp_path: Path) -> Iterator[SimulatedVelero]:
    velero = SimulatedVelero({"zurich": cluster.api()}, tmp_path / "store").start()
    try:
        yield velero
    finally:
        velero.stop()


def hooked_config(tmp_path: Path, **overrides: Any) -> Config:
    schedule = {"name": "daily", "namespaces": ["prod"], "sites": ["zurich"], "hooks": [FREEZE]}
    return make_config(tmp_path, schedules=[schedule], **overrides)


# -- the site file ------------------------------------------------------------------------

_SCHEDULE = "[[dr.schedules]]\nname = 'daily'\nnamespaces = ['prod']\n[[dr.schedules.hooks]]\n"
_DRILL = "[[dr.drills]]\nsite = 'zurich'\nnamespace = 'prod'\n[[dr.drills.restore_hooks]]\n"
_SITES = "site = 'zurich'\n[sites.zurich]\n"


@pytest.mark.parametrize(
    ("body", "key", "reason"),
    [
        (_SCHEDULE + "name = 'f'\npre = [{ command = [] }]\n", "pre[0].command", "at least 1"),
        (_SCHEDULE + "name = 'f'\npre = [{ command = [''] }]\n", "pre[0].command[0]", "at least"),
        (_SCHEDULE + "name = 'f'\npre = [{ command = 'sync' }]\n", "pre[0].command", "list"),
        (
            _SCHEDULE + "name = 'f'\npost = [{ command = ['x'], on_error = 'Abort' }]\n",
            "post[0].on_error",
            "'Fail' or 'Continue'",
        ),
        (
            _SCHEDULE + "name = 'f'\npre = [{ command = ['x'], timeout_seconds = 0 }]\n",
            "pre[0].timeout_seconds",
            "greater than 0",
        ),
        (
            _SCHEDULE + "name = 'f'\npre = [{ command = ['x'], onError = 'Fail' }]\n",
            "pre[0].onError",
            "unknown key",
        ),
        (_SCHEDULE + "name = 'f'\n", "", "at least one pre or post exec hook"),
        (_SCHEDULE + "pre = [{ command = ['x'] }]\n", "name", "Field required"),
    ],
)
def test_backup_hook_errors_name_the_key(tmp_path: Path, body: str, key: str, reason: str) -> None:
    where = "dr.schedules[0].hooks[0]" + (f".{key}" if key else "")
    _assert_config_error(tmp_path, _SITES + body, where, reason)


@pytest.mark.parametrize(
    ("body", "key", "reason"),
    [
        ("name = 'r'\npost_hooks = []\n", "post_hooks", "at least 1"),
        (
            "name = 'r'\npost_hooks = [{ command = ['x'], wait_timeout_seconds = -1 }]\n",
            "post_hooks[0].wait_timeout_seconds",
            "greater than 0",
        ),
        (
            "name = 'r'\npost_hooks = [{ command = ['x'], exec_timeout_seconds = 0 }]\n",
            "post_hooks[0].exec_timeout_seconds",
            "greater than 0",
        ),
        ("name = 'r'\npost = [{ command = ['x'] }]\n", "post", "unknown key"),
    ],
)
def test_restore_hook_errors_name_the_key(tmp_path: Path, body: str, key: str, reason: str) -> None:
    _assert_config_error(
        tmp_path, _SITES + _DRILL + body, f"dr.drills[0].restore_hooks[0].{key}", reason
    )


def _assert_config_error(tmp_path: Path, body: str, key: str, reason: str) -> None:
    path = tmp_path / "site.toml"
    path.write_text(body)
    with pytest.raises(config.ConfigError) as error:
        config.load(path)
    lines = [line.strip() for line in str(error.value).splitlines()]
    assert any(line.startswith(f"{key}: ") and reason in line for line in lines), lines


# -- the Velero objects ---------------------------------------------------------------------


def test_backup_and_schedule_carry_the_hooks(cluster: EmulatorThread, tmp_path: Path) -> None:
    cfg = hooked_config(tmp_path)
    ctx = ops.Context(cfg, api_clients={"zurich": cluster.api()})
    name = ops.trigger_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    backup = ctx.velero("zurich").get("backups", name)
    assert backup["spec"]["hooks"] == FREEZE_SPEC
    assert_valid("Backup", backup)
    # an ad-hoc backup of the namespace (CLI, runbook webhook) is taken as consistently
    name = api.backup_now(cfg, "prod", reason="test", api_client=cluster.api())
    assert ctx.velero("zurich").get("backups", name)["spec"]["hooks"] == FREEZE_SPEC
    name = api.backup_now(cfg, "other", reason="test", api_client=cluster.api())
    assert "hooks" not in ctx.velero("zurich").get("backups", name)["spec"]

    sched = cfg.dr.schedules[0].model_copy(update={"velero_schedule": True})
    ctx = ops.Context(with_dr(cfg, schedules=[sched]), api_clients={"zurich": cluster.api()})
    assert ops.sync_velero_schedules(ctx, "zurich") == {"daily-zurich": "created"}
    # read back by the harness: the DR code itself never reads a Schedule (RBAC stays minimal)
    schedule = client.CustomObjectsApi(cluster.api()).get_namespaced_custom_object(
        "velero.io", "v1", "velero", "schedules", "daily-zurich"
    )
    assert schedule["spec"]["template"]["hooks"] == FREEZE_SPEC
    assert_valid("Schedule", schedule)


def test_the_crd_check_catches_a_misspelled_field() -> None:
    """The schema check of these tests fails on what the API server would prune."""
    hooks = {
        "resources": [{"name": "x", "pre": [{"exec": {"command": ["x"], "on_error": "Fail"}}]}]
    }
    errors = list(velero_validator("Backup").iter_errors({"spec": {"hooks": hooks}}))
    assert any("on_error" in e.message for e in errors)
    hooks["resources"][0]["pre"][0]["exec"] = {"command": [], "onError": "Fail"}
    assert list(velero_validator("Backup").iter_errors({"spec": {"hooks": hooks}}))


def test_hooks_default_to_the_schedule_namespaces_and_first_container(tmp_path: Path) -> None:
    hook = {"name": "sync", "namespaces": ["db"], "pre": [{"command": ["sync"]}]}
    schedule = {"name": "daily", "namespaces": ["prod", "db"], "hooks": [hook, FREEZE]}
    cfg = make_config(tmp_path, schedules=[schedule])
    spec = v.backup_spec(cfg.dr.schedules[0])
    first, second = spec["hooks"]["resources"]
    # no container: Velero's default, the pod's first one; no selector: every pod
    assert first == {
        "name": "sync",
        "includedNamespaces": ["db"],
        "pre": [{"exec": {"command": ["sync"], "onError": "Fail", "timeout": "30s"}}],
    }
    assert second["includedNamespaces"] == ["prod", "db"]
    assert_valid("Backup", {"spec": spec})


def test_drill_restore_hooks_match_the_scratch_namespace(
    cluster: EmulatorThread, sim: SimulatedVelero, tmp_path: Path
) -> None:
    """Velero matches a restore hook's namespaces after ``namespaceMapping``: the hook of
    ``prod`` must name the scratch namespace, and runs in the restored pods there."""
    seed_app(cluster)
    drill = {"site": "zurich", "namespace": "prod", "fresh_backup": True, "restore_hooks": [READY]}
    cfg = hooked_config(tmp_path, drills=[drill])
    ctx = ops.Context(cfg, api_clients={"zurich": cluster.api()})
    report = ops.run_drill(ctx, cfg.dr.drills[0])
    assert report.verified, report.error

    backup = ctx.velero("zurich").get("backups", report.backup)
    assert backup["spec"]["hooks"] == FREEZE_SPEC  # the schedule's hooks: as consistent
    restore = ctx.velero("zurich").get("restores", report.restore)
    assert restore["spec"]["hooks"] == {
        "resources": [
            {
                "name": "db-ready",
                "includedNamespaces": [report.scratch_namespace],
                "labelSelector": {"matchLabels": {"app": "db"}},
                "postHooks": [
                    {
                        "exec": {
                            "container": "db",
                            "command": ["pg_isready"],
                            "onError": "Fail",
                            "execTimeout": "30s",
                            "waitTimeout": "120s",
                        }
                    }
                ],
            }
        ]
    }
    assert_valid("Restore", restore)
    ran = sim.hook_log("Restore", report.restore)
    assert [(h["hook"], h["pod"], h["namespace"], h["ok"]) for h in ran] == [
        ("db-ready", "db-0", report.scratch_namespace, True),
        ("db-ready", "db-1", report.scratch_namespace, True),
    ]


# -- hooks that run, and fail ---------------------------------------------------------------


def test_hooks_run_pre_then_post(cluster: EmulatorThread, sim: SimulatedVelero, tmp_path) -> None:
    seed_app(cluster)
    cfg = hooked_config(tmp_path)
    ctx = ops.Context(cfg, api_clients={"zurich": cluster.api()})
    outcome = ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    assert outcome.phase == "Completed" and outcome.detail == "Completed (hooks: 0 of 4 failed)"
    log = [
        (h["phase"], h["pod"], h["command"][1], h["ok"])
        for h in sim.hook_log("Backup", outcome.name)
    ]
    assert log == [
        ("pre", "db-0", "--freeze", True),
        ("pre", "db-1", "--freeze", True),
        ("post", "db-0", "--unfreeze", True),
        ("post", "db-1", "--unfreeze", True),
    ]


def test_a_failing_pre_hook_leaves_the_backup_partially_failed(
    cluster: EmulatorThread, sim: SimulatedVelero, tmp_path: Path
) -> None:
    """``db-1`` lacks the ``db`` container: its pre hook fails, ``onError: Fail`` skips its
    post hook, and Velero ends the Backup PartiallyFailed, which DR does not count as a
    usable backup (no last-success time, no RPO)."""
    seed_app(cluster, db_container="postgres")
    cfg = hooked_config(tmp_path)
    ctx = ops.Context(cfg, api_clients={"zurich": cluster.api()})
    with pytest.raises(RuntimeError) as err:
        ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    name = "daily-zurich-20260301020000"
    assert str(err.value) == f"backup {name} on zurich ended PartiallyFailed (hooks: 1 of 3 failed)"

    backup = ctx.velero("zurich").get("backups", name)
    assert backup["status"]["phase"] == "PartiallyFailed"
    assert backup["status"]["hookStatus"] == {"hooksAttempted": 3, "hooksFailed": 1}
    log = sim.hook_log("Backup", name)
    assert [(h["phase"], h["pod"], h["ok"]) for h in log] == [
        ("pre", "db-0", True),
        ("pre", "db-1", False),
        ("post", "db-0", True),
    ]
    assert "container" in log[1]["error"]

    got = samples(ctx)
    phase = (("phase", "PartiallyFailed"), ("schedule", "daily"), ("site", "zurich"))
    assert got[("gotthard_dr_backups_total", phase)] == 1
    # DRBackupFailed fires on this, at once: a failure newer than any success
    failed = ("gotthard_dr_backup_last_failure_timestamp_seconds", phase[1:])
    assert got[failed] > 0
    assert not any(key[0] == "gotthard_dr_backup_last_success_timestamp_seconds" for key in got)
    assert not any(key[0] == "gotthard_dr_rpo_seconds" for key in got)
    assert ctx.velero("zurich").latest_completed_backup("prod") is None

    # a drill of the namespace finds no usable backup, and says which phase failed
    report = ops.run_drill(ctx, cfg.dr.drills[0])
    assert not report.verified and "no Completed backup of prod" in report.error
    assert [(p["name"], p["ok"]) for p in report.phases] == [("backup", False), ("cleanup", True)]
    # a fresh drill backup carries the same hooks and fails the same way
    report = ops.run_drill(ctx, cfg.dr.drills[0], fresh_backup=True)
    assert not report.verified
    assert report.checks == [
        {
            "name": "backup-completed",
            "ok": False,
            "detail": "PartiallyFailed (hooks: 1 of 3 failed)",
        }
    ]
    assert report.phases[0]["detail"] == f"{report.backup}: PartiallyFailed (hooks: 1 of 3 failed)"
