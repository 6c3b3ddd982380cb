"""Drill phases (backup, restore, verify, cleanup) and the cross-site drill: a backup
taken in Zurich restored in Lugano, through ``gotthard dr drill`` run in this process.

Two emulated API servers stand for the two sites' clusters; one simulated Velero drives
both with one shared object store, so a Completed Backup in Zurich appears in Lugano as
Velero's backup sync would make it appear (:mod:`gotthard_testing.velero_sim`).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gotthard.dr import ops
from gotthard_testing.velero_sim import SimulatedVelero
from tests.support.cli import run_in_process
from tests.support.kube import EmulatorThread, sandbox_resources

from .sitefiles import site_entry, site_file
from .test_hooks import FREEZE, READY, seed_app

PHASES = ["backup", "restore", "verify", "cleanup"]


class TwoSites:
    """Zurich's and Lugano's emulated clusters, the simulated Velero over both, and a site
    file naming them (Zurich's drill of ``prod`` restores at Zurich unless told)."""

    def __init__(self, zurich: EmulatorThread, lugano: EmulatorThread, tmp_path: Path) -> None:
        self.zurich, self.lugano = zurich, lugano
        self.velero = SimulatedVelero(
            {"zurich": zurich.api(), "lugano": lugano.api()}, tmp_path / "store"
        )
        sites = {
            "zurich": site_entry(str(zurich.kubeconfig(tmp_path / "zurich.yaml")), "zrh-a"),
            "lugano": site_entry(str(lugano.kubeconfig(tmp_path / "lugano.yaml")), "lug-a"),
        }
        self.tmp_path, self.sites = tmp_path, sites
        self.site = self.write_site()

    def write_site(self, restore_hooks: list[dict[str, Any]] | None = None) -> str:
        """The site file: Zurich backs up ``prod`` with the freeze hooks; its drill has
        *restore_hooks* (default: the readiness hook)."""
        schedule = {"name": "daily", "namespaces": ["prod"], "sites": ["zurich"]}
        drill = {"site": "zurich", "namespace": "prod", "restore_hooks": restore_hooks or [READY]}
        path = site_file(
            self.tmp_path,
            self.zurich,
            sites=self.sites,
            schedules=[{**schedule, "hooks": [FREEZE]}],
            drills=[drill],
        )
        return str(path)


@pytest.fixture
def two_sites(kube_emulator: Callable[..., EmulatorThread], tmp_path: Path) -> Iterator[TwoSites]:
    sites = TwoSites(
        kube_emulator(*sandbox_resources("kubernetes")),
        kube_emulator(*sandbox_resources("kubernetes")),
        tmp_path,
    )
    sites.velero.start()
    try:
        yield sites
    finally:
        sites.velero.stop()


def drill(capsys: pytest.CaptureFixture[str], site: str, *args: str) -> tuple[int, Any, str]:
    """``gotthard --config SITE dr drill ARGS`` in this process: exit status, the JSON
    report (None if stdout is not one) and stderr."""
    capsys.readouterr()
    code = run_in_process("--config", site, "dr", "drill", *args)
    out, err = capsys.readouterr()
    try:
        return code, json.loads(out), err
    except json.JSONDecodeError:
        return code, None, err


def _when(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_cross_site_drill_reports_its_phases(
    two_sites: TwoSites, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seed_app(two_sites.zurich)
    md = tmp_path / "drill.md"
    code, report, err = drill(
        capsys, two_sites.site,
        "--site", "zurich", "--target-site", "lugano", "--namespace", "prod", "--fresh",
        "--report", str(md),
    )  # fmt: skip
    assert code == 0, (report, err)
    assert report["verified"] is True, report["error"]
    assert (report["site"], report["target_site"]) == ("zurich", "lugano")
    # backed up in Zurich (with the schedule's hooks), restored in Lugano only
    zurich, lugano = (
        client.CustomObjectsApi(k.api()) for k in (two_sites.zurich, two_sites.lugano)
    )
    args = ("velero.io", "v1", "velero")
    backup = zurich.get_namespaced_custom_object(*args, "backups", report["backup"])
    assert backup["spec"]["hooks"]["resources"][0]["name"] == "freeze-db"
    assert [
        r["metadata"]["name"]
        for r in lugano.list_namespaced_custom_object(*args, "restores")["items"]
    ] == [report["restore"]]
    assert zurich.list_namespaced_custom_object(*args, "restores")["items"] == []
    assert [h["namespace"] for h in two_sites.velero.hook_log("Restore", report["restore"])] == [
        report["scratch_namespace"]
    ] * 2
    assert report["scratch_namespace"] not in two_sites.lugano.emulator.namespaces
    assert report["checks"][-1] == {
        "name": "deployments.apps/v1",
        "ok": True,
        "detail": "1 found (min 1), 1 ready",
    }

    phases = report["phases"]
    assert [p["name"] for p in phases] == PHASES
    assert all(p["ok"] is True for p in phases), phases
    assert all(set(p) == {"name", "started", "duration_seconds", "ok", "detail"} for p in phases)
    starts = [_when(p["started"]) for p in phases]
    assert starts == sorted(starts)
    for before, after in itertools.pairwise(phases):
        # each phase starts once the one before it ended (to the clock's millisecond)
        assert (
            _when(after["started"]) >= _when(before["started"]) + before["duration_seconds"] - 0.002
        )
    assert all(p["duration_seconds"] >= 0 for p in phases)
    # RTO runs from the drill's start to verified: it covers backup, restore and verify
    spent = sum(p["duration_seconds"] for p in phases[:3])
    assert spent <= report["rto_seconds"] + 0.01
    assert phases[0]["detail"] == f"{report['backup']}: Completed (hooks: 0 of 4 failed)"
    assert phases[1]["detail"] == f"{report['restore']}: Completed (hooks: 0 of 2 failed)"
    assert phases[2]["detail"] == "passed: deployments.apps/v1"
    assert phases[3]["detail"] == f"deleted {report['scratch_namespace']} on lugano"

    text = md.read_text()
    assert text.startswith("# DR drill: prod (zurich → lugano)")
    assert "| phase | started | duration | ok | detail |" in text
    for p in phases:
        took = f"{p['duration_seconds']:.2f} s"
        assert f"| {p['name']} | {p['started']} | {took} | yes | {p['detail']} |" in text


def test_target_site_overrides_and_ad_hoc_drills(
    two_sites: TwoSites, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--target-site`` overrides the configured drill's target; a namespace with no
    configured drill gets an ad-hoc one with the default checks."""
    seed_app(two_sites.zurich, "staging")
    code, report, err = drill(
        capsys, two_sites.site,
        "--site", "zurich", "--target-site", "lugano", "--namespace", "staging", "--fresh",
    )  # fmt: skip
    assert code == 0, (report, err)
    assert report["target_site"] == "lugano" and report["namespace"] == "staging"
    assert [c["name"] for c in report["checks"]] == [
        "backup-completed",
        "restore-completed",
        "deployments.apps/v1",
    ]
    # no configured restore hooks for an ad-hoc drill
    restore = client.CustomObjectsApi(two_sites.lugano.api()).get_namespaced_custom_object(
        "velero.io", "v1", "velero", "restores", report["restore"]
    )
    assert "hooks" not in restore["spec"]

    # the configured drill of prod restores at Zurich, its own site, unless told otherwise
    seed_app(two_sites.zurich)
    code, report, err = drill(
        capsys, two_sites.site, "--site", "zurich", "--namespace", "prod", "--fresh"
    )
    assert code == 0, (report, err)
    assert report["target_site"] == "zurich" and [p["name"] for p in report["phases"]] == PHASES


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--site", "zurich", "--target-site", "geneva"), "--target-site: unknown site 'geneva'"),
        (("--site", "bern"), "--site: unknown site 'bern'"),
    ],
)
def test_unknown_sites_are_usage_errors(
    two_sites: TwoSites,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    message: str,
) -> None:
    code, report, err = drill(capsys, two_sites.site, *flags, "--namespace", "prod")
    assert code == 2 and report is None
    assert err == f"gotthard: {message} (known: lugano, zurich)\n"


def test_a_failing_backup_hook_fails_the_backup_phase(
    two_sites: TwoSites, capsys: pytest.CaptureFixture[str]
) -> None:
    """The schedule's freeze hook, carried by the drill's fresh backup, cannot run in
    ``db-1`` (no ``db`` container): the Backup ends PartiallyFailed, not usable; nothing is
    restored; the scratch namespace is still cleaned up."""
    seed_app(two_sites.zurich, db_container="postgres")
    code, report, _ = drill(
        capsys, two_sites.site,
        "--site", "zurich", "--target-site", "lugano", "--namespace", "prod", "--fresh",
    )  # fmt: skip
    assert code == 1
    phases = [(p["name"], p["ok"]) for p in report["phases"]]
    assert phases == [("backup", False), ("cleanup", True)]
    assert report["phases"][0]["detail"].endswith(": PartiallyFailed (hooks: 1 of 3 failed)")
    assert report["rto_seconds"] is None and report["cleaned"] is True
    assert report["restore"] == ""


@pytest.mark.parametrize("how", ["hook", "Failed"])
def test_a_failed_restore_fails_the_restore_phase(
    two_sites: TwoSites, capsys: pytest.CaptureFixture[str], tmp_path: Path, how: str
) -> None:
    """A restore hook that cannot run (the restored pods have no ``probe`` container)
    leaves the Restore PartiallyFailed; a Restore can also just fail. Either way the
    restore phase fails, verify does not run, cleanup does."""
    seed_app(two_sites.zurich)
    site = two_sites.site
    if how == "hook":
        site = two_sites.write_site(
            [{**READY, "post_hooks": [{"container": "probe", "command": ["true"]}]}]
        )
        expected = "PartiallyFailed (hooks: 2 of 2 failed)"
    else:
        two_sites.velero.outcome = lambda kind, name: how if kind == "Restore" else "Completed"
        expected = how
    md = tmp_path / "drill.md"
    code, report, _ = drill(
        capsys, site,
        "--site", "zurich", "--target-site", "lugano", "--namespace", "prod", "--fresh",
        "--report", str(md),
    )  # fmt: skip
    assert code == 1
    assert [(p["name"], p["ok"]) for p in report["phases"]] == [
        ("backup", True),
        ("restore", False),
        ("cleanup", True),
    ]
    assert report["phases"][1]["detail"] == f"{report['restore']}: {expected}"
    assert f"restore-completed: {expected}" in report["error"]
    restore = report["phases"][1]
    row = f"| restore | {restore['started']} | {restore['duration_seconds']:.2f} s | no |"
    assert row in md.read_text()


def test_phase_timings_follow_the_clock(two_sites: TwoSites, tmp_path: Path) -> None:
    """Each phase's start and duration come from the drill's clock (here one that advances
    a second per reading), not from Velero's whole-second timestamps."""
    seed_app(two_sites.zurich)
    ticks = iter(range(1_000_000))
    from .conftest import make_config

    cfg = make_config(tmp_path, drills=[{"site": "zurich", "namespace": "prod"}])
    ctx = ops.Context(
        cfg,
        api_clients={"zurich": two_sites.zurich.api()},
        clock=lambda: 1_772_330_400.0 + next(ticks),  # 2026-03-01T02:00:00Z
    )
    report = ops.run_drill(ctx, cfg.dr.drills[0])  # no backup yet: the backup phase fails
    assert report.phases[0] == {
        "name": "backup",
        "started": "2026-03-01T02:00:02.000Z",
        "duration_seconds": 1.0,
        "ok": False,
        "detail": "RuntimeError: no Completed backup of prod on zurich",
    }
    assert report.phases[1]["name"] == "cleanup" and report.phases[1]["ok"] is True
