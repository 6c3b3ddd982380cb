"""Restarts: kill -9 in the middle of a drill (child processes), and missed slots fired by
the scheduler itself after a restart (SQLite job store, misfire_grace_time, coalesce)."""

from __future__ import annotations

import datetime as dt
import signal
import time
from pathlib import Path

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from gotthard import config
from gotthard.dr import ops
from gotthard.dr import velero as v
from gotthard.dr.daemon import DrDaemon, last_slot
from tests.support.kube import EmulatorThread
from tests.support.wait import wait_until

from .conftest import make_config
from .emulator import SimulatedVeleroController
from .sitefiles import ROOT, background, site_file, wait_http
from .test_velero_drill import seed_prod

DAY = dt.timedelta(days=1)


def velero_items(k8s: EmulatorThread, plural: str) -> list[dict]:
    custom = client.CustomObjectsApi(k8s.api())
    return custom.list_namespaced_custom_object("velero.io", "v1", "velero", plural)["items"]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    import urllib.request

    body = urllib.request.urlopen(url, timeout=2).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(body)
        for s in fam.samples
    }


def test_kill_9_mid_drill_then_restart(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    """A drill killed (SIGKILL) while its Restore is InProgress; a fresh ``gotthard dr
    daemon`` process then: deletes the orphan scratch namespace, marks the drill failed,
    does not run the drill's slot again, and the slot keeps exactly one Backup."""
    seed_prod(k8s)
    velero.outcome = lambda kind, name: "stuck" if kind == "Restore" else "Completed"
    site = site_file(
        tmp_path,
        k8s,
        drills=[{"site": "zurich", "namespace": "prod", "cron": "0 4 * * 0", "fresh_backup": True}],
    )
    cfg = config.load(site)
    log1 = tmp_path / "child1.log"
    with background(
        str(ROOT / "tests/dr/child_daemon.py"), str(site), "drill:zurich:prod", log=log1
    ) as child:
        wait_until(
            lambda: any(v.phase_of(r) == "InProgress" for r in velero_items(k8s, "restores")),
            timeout=20,
            what=lambda: f"the drill to reach a restore InProgress:\n{log1.read_text()}",
        )
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    slot = last_slot("0 4 * * 0", "UTC", dt.datetime.now(dt.UTC))
    backup = v.slot_name("drill-prod-zurich", slot)
    [restore] = velero_items(k8s, "restores")
    scratch = restore["spec"]["namespaceMapping"]["prod"]
    assert scratch in k8s.emulator.namespaces  # what the crash left behind
    assert [b["metadata"]["name"] for b in velero_items(k8s, "backups")] == [backup]

    # Restart: the real command, as a new process (the old Lease expires, the flock of the
    # killed process is gone). The orphaned Restore stays stuck; Velero would not finish it.
    velero.outcome = lambda kind, name: (
        "stuck" if name == restore["metadata"]["name"] else "Completed"
    )
    base = f"http://{cfg.dr.listen}"
    with background(
        "-m", "gotthard", "--config", str(site), "dr", "daemon", log=tmp_path / "child2.log"
    ) as daemon:
        wait_http(f"{base}/healthz", lambda h: h["leader"], timeout=20)
        got = scrape(f"{base}/metrics")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(10) == 0
    labels = (("namespace", "prod"), ("site", "zurich"))
    assert got[("gotthard_dr_drill_last_success", labels)] == 0  # marked failed
    assert got[("gotthard_dr_drill_last_timestamp_seconds", labels)] > 0
    assert got[("gotthard_dr_drill_orphans_cleaned_total", (("site", "zurich"),))] == 1
    assert not any(k[0].startswith("gotthard_dr_scheduler_job_events") for k in got)  # no re-run
    assert scratch not in k8s.emulator.namespaces
    assert [b["metadata"]["name"] for b in velero_items(k8s, "backups")] == [backup]

    # The same slot triggered again (a duplicated or retried trigger): the Backup is reused
    # (409), the drill verifies, and the slot still has exactly one Backup.
    ctx = ops.Context(cfg, api_clients={"zurich": k8s.api(), "lugano": k8s.api()})
    report = ops.run_drill(ctx, cfg.dr.drills[0], slot=slot)
    assert report.verified, report.error
    assert report.backup == backup and report.cleaned
    assert [b["metadata"]["name"] for b in velero_items(k8s, "backups")] == [backup]


def events(daemon: DrDaemon, job: str, event: str) -> float:
    value = daemon.metrics.registry.get_sample_value(
        "gotthard_dr_scheduler_job_events_total", {"job": job, "event": event}
    )
    return value or 0.0


def test_scheduler_fires_missed_slot_once_after_restart_and_it_is_a_noop(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    """The persisted job store says three daily slots are due (the daemon was down, or it
    died between running a slot and storing the next run time). On restart the scheduler
    itself fires once (coalesce, within misfire_grace_time); the run belongs to the slot
    already backed up, so its Backup create answers 409 and nothing new is made."""
    job = "backup:zurich:daily"
    cfg = make_config(tmp_path, misfire_grace_seconds=3 * 86400, drills=[])
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    slot = last_slot("0 2 * * *", "UTC", dt.datetime.now(dt.UTC))
    name = v.slot_name("daily-zurich", slot)

    first = DrDaemon(cfg, api_clients=apis, identity="a")
    sched = first.start_scheduler()
    sched.modify_job(job, next_run_time=slot)  # the slot is due now: the scheduler runs it
    wait_until(lambda: events(first, job, "executed") == 1)
    assert [b["metadata"]["name"] for b in velero_items(k8s, "backups")] == [name]
    assert sched.get_job(job).next_run_time == slot + DAY
    sched.pause()
    sched.modify_job(job, next_run_time=slot - 2 * DAY)  # what the store holds after the crash
    first.stop_scheduler()

    second = DrDaemon(cfg, api_clients=apis, identity="a")
    sched = second.start_scheduler()
    wait_until(lambda: events(second, job, "executed") >= 1)
    time.sleep(0.3)  # an uncoalesced second or third run would show up here
    assert events(second, job, "executed") == 1 and events(second, job, "missed") == 0
    assert sched.get_job(job).next_run_time == slot + DAY
    # the follow job records the existing Backup's end instead of a new one being made
    wait_until(
        lambda: (
            second.metrics.registry.get_sample_value(
                "gotthard_dr_backups_total",
                {"site": "zurich", "schedule": "daily", "phase": "Completed"},
            )
            == 1
        ),
        what="the follow job to record the slot's Backup",
    )
    second.stop_scheduler()
    assert [b["metadata"]["name"] for b in velero_items(k8s, "backups")] == [name]


def test_missed_slot_past_misfire_grace_is_skipped_after_restart(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    job = "backup:zurich:daily"
    cfg = make_config(tmp_path, misfire_grace_seconds=1, drills=[])
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    slot = last_slot("0 2 * * *", "UTC", dt.datetime.now(dt.UTC))
    first = DrDaemon(cfg, api_clients=apis, identity="a")
    first.start_scheduler().pause()
    assert first.scheduler is not None
    first.scheduler.modify_job(job, next_run_time=slot - 2 * DAY)
    first.stop_scheduler()

    second = DrDaemon(cfg, api_clients=apis, identity="a")
    sched = second.start_scheduler()
    wait_until(lambda: events(second, job, "missed") == 1)
    assert events(second, job, "executed") == 0
    assert sched.get_job(job).next_run_time == slot + DAY
    second.stop_scheduler()
    assert velero_items(k8s, "backups") == []
