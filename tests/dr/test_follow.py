"""Scheduled backups are created at their slot and followed by one LIST per site: no
worker thread waits on Velero, so many schedules due together all get their Backup at
once, and each outcome is recorded once, after a change of leader too."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from gotthard.dr import velero as v
from gotthard.dr.daemon import DrDaemon, backup_job, last_slot
from tests.support.kube import EmulatorThread
from tests.support.wait import wait_until

from .conftest import make_config
from .emulator import SimulatedVeleroController
from .test_restart import events, velero_items

#: More schedules due together than the scheduler has worker threads (10).
DUE = 25


def metric(daemon: DrDaemon, name: str, **labels: str) -> float:
    return daemon.metrics.registry.get_sample_value(name, labels) or 0.0


def phase_total(daemon: DrDaemon, phase: str) -> float:
    return sum(
        metric(daemon, "gotthard_dr_backups_total", site="zurich", schedule=f"s{i}", phase=phase)
        for i in range(DUE)
    )


def test_schedules_due_together_all_get_their_backup_while_velero_works(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    stuck = True
    velero.outcome = lambda kind, name: (
        "stuck" if stuck else "Failed" if name.startswith("s7-") else "Completed"
    )
    cfg = make_config(
        tmp_path,
        backup_timeout_seconds=3600,
        misfire_grace_seconds=86400,  # the slot (02:00) is fired late, as after a restart
        drills=[],
        schedules=[
            {"name": f"s{i}", "namespaces": [f"ns{i}"], "cron": "0 2 * * *", "sites": ["zurich"]}
            for i in range(DUE)
        ],
    )
    daemon = DrDaemon(cfg, api_clients={"zurich": k8s.api(), "lugano": k8s.api()}, identity="a")
    sched = daemon.start_scheduler()
    try:
        sched.pause()
        slot = last_slot("0 2 * * *", "UTC", dt.datetime.now(dt.UTC))
        for i in range(DUE):
            sched.modify_job(f"backup:zurich:s{i}", next_run_time=slot)
        sched.resume()
        # every slot's Backup exists while Velero has finished none of them
        wait_until(
            lambda: len(velero_items(k8s, "backups")) == DUE,
            timeout=10,
            what=lambda: f"{DUE} Backups, have {len(velero_items(k8s, 'backups'))}",
        )
        wait_until(
            lambda: (
                sum(events(daemon, f"backup:zurich:s{i}", "executed") for i in range(DUE)) == DUE
            )
        )
        assert not any(events(daemon, f"backup:zurich:s{i}", "missed") for i in range(DUE))
        assert {b["metadata"]["name"] for b in velero_items(k8s, "backups")} == {
            v.slot_name(f"s{i}-zurich", slot) for i in range(DUE)
        }
        in_progress = "gotthard_dr_backups_in_progress"
        wait_until(lambda: metric(daemon, in_progress, site="zurich") == DUE)
        assert phase_total(daemon, "Completed") == 0

        stuck = False  # Velero finishes them: s7 fails, the others complete
        wait_until(lambda: metric(daemon, in_progress, site="zurich") == 0, timeout=10)
        assert phase_total(daemon, "Completed") == DUE - 1
        assert phase_total(daemon, "Failed") == 1
        last_ok = "gotthard_dr_backup_last_success_timestamp_seconds"
        assert metric(daemon, last_ok, site="zurich", schedule="s0") > 0
        assert metric(daemon, last_ok, site="zurich", schedule="s7") == 0
        failed = "gotthard_dr_backup_last_failure_timestamp_seconds"
        assert metric(daemon, failed, site="zurich", schedule="s7") > 0
        # a round with nothing unfinished records nothing again
        assert daemon.follow("zurich") == {}
        assert phase_total(daemon, "Completed") == DUE - 1
    finally:
        daemon.stop_scheduler()


def test_a_new_leader_follows_what_the_old_one_left_unfinished(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    """The first leader creates two slots' Backups and stops (the lease moved, or it was
    killed); one of them finishes while nobody leads. The next leader counts only the
    one it saw finish, once."""
    stuck = {"weekly"}
    velero.outcome = lambda kind, name: (
        "stuck" if any(name.startswith(f"{s}-") for s in stuck) else "Completed"
    )
    cfg = make_config(
        tmp_path,
        drills=[],
        backup_timeout_seconds=3600,
        schedules=[
            {"name": "daily", "namespaces": ["a"], "cron": "0 2 * * *", "sites": ["zurich"]},
            {"name": "weekly", "namespaces": ["b"], "cron": "0 3 * * 0", "sites": ["zurich"]},
        ],
    )
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    first = DrDaemon(cfg, api_clients=apis, identity="a")
    first.start_scheduler().pause()
    daily, weekly = backup_job("zurich", "daily"), backup_job("zurich", "weekly")
    wait_until(lambda: any(v.phase_of(b) == "Completed" for b in velero_items(k8s, "backups")))
    first.stop_scheduler()  # nobody followed "daily" to its end

    second = DrDaemon(cfg, api_clients=apis, identity="b")
    second.start_scheduler()
    try:
        wait_until(lambda: metric(second, "gotthard_dr_backups_in_progress", site="zurich") == 1)
        total = "gotthard_dr_backups_total"
        stuck.clear()
        wait_until(
            lambda: metric(second, total, site="zurich", schedule="weekly", phase="Completed") == 1
        )
        # "daily" had finished before this leader: not counted by it
        assert metric(second, total, site="zurich", schedule="daily", phase="Completed") == 0
        assert {b["metadata"]["name"] for b in velero_items(k8s, "backups")} == {daily, weekly}
    finally:
        second.stop_scheduler()


def test_a_backup_unfinished_past_its_timeout_is_recorded_once(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    velero.outcome = lambda kind, name: "stuck"
    now = [1_000_000.0]
    cfg = make_config(tmp_path, drills=[], backup_timeout_seconds=600)
    daemon = DrDaemon(cfg, api_clients={"zurich": k8s.api()}, identity="a", clock=lambda: now[0])
    daemon.start_scheduler().pause()  # rounds by hand, on the test's clock
    try:
        name = backup_job("zurich", "daily")
        assert daemon.follow("zurich") == {}
        now[0] += 599
        assert daemon.follow("zurich") == {}
        now[0] += 1
        assert daemon.follow("zurich") == {name: None}
        timeout = {"site": "zurich", "schedule": "daily", "phase": "Timeout"}
        assert metric(daemon, "gotthard_dr_backups_total", **timeout) == 1
        failed = "gotthard_dr_backup_last_failure_timestamp_seconds"
        assert metric(daemon, failed, site="zurich", schedule="daily") == now[0]
        now[0] += 600
        assert daemon.follow("zurich") == {}  # recorded once
        assert metric(daemon, "gotthard_dr_backups_total", **timeout) == 1
        assert metric(daemon, "gotthard_dr_backups_in_progress", site="zurich") == 0
    finally:
        daemon.stop_scheduler()
