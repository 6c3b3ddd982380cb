"""Recovery tiers: configuration, drills judged against their tier, metrics, ``dr status``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes import client

from gotthard import config
from gotthard.dr import ops
from tests.support.kube import EmulatorThread

from .conftest import make_config
from .emulator import SimulatedVeleroController
from .sitefiles import gotthard, site_file
from .test_velero_drill import SLOT, samples, seed_prod

#: "gold" promises a fresh backup and a restore faster than any real drill can be;
#: "bronze" a day of data and an hour to recover.
TIERS = {
    "gold": {"rpo_seconds": 3600, "rto_seconds": 0.001},
    "bronze": {"rpo_seconds": 86400, "rto_seconds": 3600},
}


def _error(dr: dict[str, object]) -> str:
    with pytest.raises(config.ConfigError) as err:
        config.from_mapping({"dr": dr}, "site.toml")
    return str(err.value)


def test_unknown_tier_names_the_key() -> None:
    tiers = {"bronze": TIERS["bronze"]}
    drill = {"site": "local", "namespace": "prod", "tier": "gold"}
    assert "dr.drills[0].tier: unknown tier 'gold' (known: bronze)" in _error(
        {"tiers": tiers, "drills": [drill]}
    )
    sched = {"name": "daily", "namespaces": ["prod"], "tier": "silver"}
    assert "dr.schedules[0].tier: unknown tier 'silver' (known: none configured)" in _error(
        {"schedules": [sched]}
    )
    svc = {"name": "web", "primary_site": "local", "resources": [{"kind": "Deployment"}]}
    assert "dr.placement.services[0].tier: unknown tier 'gold'" in _error(
        {"tiers": tiers, "placement": {"services": [{**svc, "tier": "gold"}]}}
    )


def test_tier_targets_must_be_positive() -> None:
    bad = {"bronze": {"rpo_seconds": 0, "rto_seconds": 3600}}
    assert "dr.tiers.bronze.rpo_seconds: Input should be greater than 0" in _error({"tiers": bad})
    assert "dr.tiers.bronze.rto_seconds: Field required" in _error(
        {"tiers": {"bronze": {"rpo_seconds": 60}}}
    )


def test_drill_is_judged_against_its_tier(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    seed_prod(k8s)
    schedule = {"name": "daily", "namespaces": ["prod"], "sites": ["zurich"], "tier": "bronze"}
    cfg = make_config(
        tmp_path,
        tiers=TIERS,
        schedules=[schedule],
        drills=[{"site": "zurich", "namespace": "prod", "tier": "gold"}],
    )
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    ops.run_backup(ctx, "zurich", cfg.dr.schedules[0], SLOT)
    rpo = samples(ctx)[
        ("gotthard_dr_rpo_seconds", (("namespace", "prod"), ("site", "zurich"), ("tier", "bronze")))
    ]
    assert rpo >= 0
    breach = (("namespace", "prod"), ("objective", "rpo"), ("site", "zurich"), ("tier", "bronze"))
    assert samples(ctx)[("gotthard_dr_tier_breach", breach)] == 0

    report = ops.run_drill(ctx, cfg.dr.drills[0])
    assert report.verified, report.error
    assert report.tier == "gold"
    rpo_judged, rto_judged = report.objectives
    assert rpo_judged == {
        "objective": "rpo",
        "target_seconds": 3600,
        "measured_seconds": report.rpo_seconds,
        "met": True,
    }
    assert rto_judged["objective"] == "rto" and rto_judged["target_seconds"] == 0.001
    assert rto_judged["measured_seconds"] == report.rto_seconds and rto_judged["met"] is False
    assert json.loads(report.to_json())["objectives"] == report.objectives
    text = report.to_markdown()
    assert "Recovery tier `gold`:" in text
    assert f"| RPO | 3600.0 s | {report.rpo_seconds:.1f} s | met |" in text
    assert f"| RTO | 0.0 s | {report.rto_seconds:.1f} s | breached |" in text

    got = samples(ctx)
    gold = (("namespace", "prod"), ("site", "zurich"), ("tier", "gold"))
    assert got[("gotthard_dr_rto_seconds", gold)] == pytest.approx(report.rto_seconds)
    assert got[("gotthard_dr_rpo_seconds", gold)] == pytest.approx(report.rpo_seconds)
    for objective, value in (("rpo", 0), ("rto", 1)):
        key = (
            ("namespace", "prod"),
            ("objective", objective),
            ("site", "zurich"),
            ("tier", "gold"),
        )
        assert got[("gotthard_dr_tier_breach", key)] == value


def test_failed_drill_breaches_rto_and_untiered_drill_is_not_judged(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    cfg = make_config(
        tmp_path,
        tiers=TIERS,
        drills=[{"site": "zurich", "namespace": "empty", "tier": "bronze"}],
    )
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api()})
    report = ops.run_drill(ctx, cfg.dr.drills[0])  # no backup of "empty": fails
    assert not report.verified
    assert [(o["objective"], o["met"]) for o in report.objectives] == [
        ("rpo", None),
        ("rto", False),
    ]
    assert "| RPO | 86400.0 s | n/a | unmeasured |" in report.to_markdown()
    got = samples(ctx)
    key = (("namespace", "empty"), ("objective", "rto"), ("site", "zurich"), ("tier", "bronze"))
    assert got[("gotthard_dr_tier_breach", key)] == 1
    assert not any(name == "gotthard_dr_rto_seconds" for name, _ in got)

    untiered = ops.run_drill(ctx, cfg.dr.drills[0].model_copy(update={"tier": ""}))
    assert untiered.tier == "" and untiered.objectives == []
    assert "Recovery tier" not in untiered.to_markdown()


def _backup_prod(k8s: EmulatorThread, completed: str) -> None:
    custom = client.CustomObjectsApi(k8s.api())
    custom.create_namespaced_custom_object(
        "velero.io",
        "v1",
        "velero",
        "backups",
        {
            "apiVersion": "velero.io/v1",
            "kind": "Backup",
            "metadata": {"name": "old-prod", "namespace": "velero"},
            "spec": {"includedNamespaces": ["prod"]},
            "status": {"phase": "Completed", "completionTimestamp": completed},
        },
    )


def test_status_shows_tier_compliance(k8s: EmulatorThread, tmp_path: Path) -> None:
    # a backup two hours old: within bronze's day, beyond gold's hour
    two_hours_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 7200))
    _backup_prod(k8s, two_hours_ago)
    schedules = [
        {"name": "daily", "namespaces": ["prod"], "sites": ["zurich"], "tier": "bronze"},
        {"name": "hourly", "namespaces": ["api"], "sites": ["zurich"], "tier": "gold"},
    ]
    site = str(site_file(tmp_path, k8s, tiers=TIERS, schedules=schedules))

    r = gotthard("--config", site, "dr", "status", "--format", "json")
    # "api" has no backup yet: its RPO is unmeasured, which is not a breach
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["zurich"]["tiers"]
    by_key = {(row["namespace"], row["objective"]): row for row in rows}
    assert by_key[("prod", "rpo")]["tier"] == "bronze"
    assert by_key[("prod", "rpo")]["met"] is True
    assert by_key[("prod", "rpo")]["measured_seconds"] == pytest.approx(7200, abs=60)
    assert by_key[("prod", "rto")] == {
        "namespace": "prod",
        "tier": "bronze",
        "objective": "rto",
        "target_seconds": 3600,
        "measured_seconds": None,
        "met": None,
    }
    assert by_key[("api", "rpo")]["met"] is None

    r = gotthard("--config", site, "dr", "status", "--format", "table")
    lines = r.stdout.splitlines()
    assert lines[0].split() == [
        "SITE", "NAMESPACE", "TIER", "OBJECTIVE", "TARGET_S", "MEASURED_S", "RESULT",
    ]  # fmt: skip
    assert lines[3].split()[:5] == ["zurich", "prod", "bronze", "rpo", "86400"]
    assert lines[3].split()[-1] == "met"
    assert lines[1].split() == ["zurich", "api", "gold", "rpo", "3600", "-", "unmeasured"]

    # the same backup judged against gold's one hour: a breach, exit 1
    schedules[0]["tier"] = "gold"
    site = str(site_file(tmp_path, k8s, tiers=TIERS, schedules=schedules))
    r = gotthard("--config", site, "dr", "status", "--format", "table")
    assert r.returncode == 1, r.stderr
    assert any(
        line.split()[1:4] == ["prod", "gold", "rpo"] and line.endswith("breached")
        for line in r.stdout.splitlines()
    )
