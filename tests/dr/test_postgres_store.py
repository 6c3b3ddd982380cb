"""The production job store, PostgreSQL, shared by two DR daemons and one Lease.

A private PostgreSQL cluster (Debian's initdb/pg_ctl, :mod:`tests.support.postgres`)
holds the APScheduler job store of two daemon processes. The leader is killed with
SIGKILL in the window a crash can hit: it ran a slot, the store says the slot is still
due. The standby takes the Lease within one lease duration, its scheduler fires the due
job from the shared store, and every slot keeps exactly one Velero Backup.
"""

from __future__ import annotations

import datetime as dt
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes import client

from gotthard import config
from gotthard.dr import velero as v
from gotthard.dr.daemon import last_slot
from tests.support.kube import EmulatorThread
from tests.support.postgres import PostgresCluster, postgres_bindir
from tests.support.wait import wait_until

from .emulator import SimulatedVeleroController
from .sitefiles import ROOT, background, site_file, wait_http
from .test_restart import scrape, velero_items

JOB = "backup:zurich:minutely"
CRON = "* * * * *"
LEASE_SECONDS = 2.0
RENEW_SECONDS = 0.2


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    # scripts/install-system-deps installs Debian's postgresql (make test runs it first)
    assert postgres_bindir() is not None, "PostgreSQL initdb/pg_ctl not found"
    with PostgresCluster() as cluster:
        yield cluster


def daemon_site(tmp_path: Path, k8s: EmulatorThread, url: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return site_file(
        tmp_path,
        k8s,
        jobstore_url=url,
        lease={
            "namespace": "gotthard",
            "duration_seconds": LEASE_SECONDS,
            "renew_seconds": RENEW_SECONDS,
        },
        schedules=[{"name": "minutely", "namespaces": ["prod"], "cron": CRON, "sites": ["zurich"]}],
        drills=[],
    )


def set_next_run(url: str, job_id: str, when: dt.datetime) -> None:
    """Write *job_id*'s next run time into the shared store, as a paused scheduler does
    (the stored job's pickled state and its indexed column change together)."""
    sched = BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url=url)})
    sched.start(paused=True)
    try:
        sched.modify_job(job_id, next_run_time=when)
    finally:
        sched.remove_jobstore("default")
        sched.shutdown(wait=False)


def lease_holder(k8s: EmulatorThread) -> str:
    lease = client.CoordinationV1Api(k8s.api()).read_namespaced_lease(
        "gotthard-dr-daemon", "gotthard"
    )
    return lease.spec.holder_identity or ""


def test_two_daemons_share_postgres_kill_9_the_leader_every_slot_one_backup(
    k8s: EmulatorThread,
    velero: SimulatedVeleroController,
    postgres: PostgresCluster,
    tmp_path: Path,
) -> None:
    site_a = daemon_site(tmp_path / "a", k8s, postgres.url)
    site_b = daemon_site(tmp_path / "b", k8s, postgres.url)
    listen_b = config.load(site_b).dr.listen
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    with background(str(ROOT / "tests/dr/child_daemon.py"), str(site_a), JOB, log=log_a) as a:
        # a leads and fires the job at once: the slot of this minute gets its Backup
        wait_until(
            lambda: any(v.phase_of(b) == "Completed" for b in velero_items(k8s, "backups")),
            timeout=30,
            what=lambda: f"the leader's first Backup:\n{log_a.read_text()}",
        )
        first_slot = velero_items(k8s, "backups")[0]["metadata"]["name"]
        holder_a = lease_holder(k8s)
        with background("-m", "gotthard", "--config", str(site_b), "dr", "daemon", log=log_b) as b:
            health = wait_http(f"http://{listen_b}/healthz", lambda h: "leader" in h, timeout=20)
            assert not health["leader"] and lease_holder(k8s) == holder_a  # b stands by
            # the crash window: a ran the slot, the store still holds it as due
            slot = last_slot(CRON, "UTC", dt.datetime.now(dt.UTC))
            set_next_run(postgres.url, JOB, slot)
            a.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            assert a.wait(10) == -signal.SIGKILL
            wait_until(
                lambda: lease_holder(k8s) == health["identity"],
                timeout=5 * LEASE_SECONDS,
                interval=0.02,
                what=lambda: f"b to take the Lease:\n{log_b.read_text()}",
            )
            took_over = time.monotonic() - killed
            # the Lease expires at most one duration after the kill; b looks every renew
            assert took_over <= LEASE_SECONDS + RENEW_SECONDS + 0.5, took_over
            wait_http(f"http://{listen_b}/healthz", lambda h: h["leader"], timeout=10)
            metrics = f"http://{listen_b}/metrics"
            executed = (
                "gotthard_dr_scheduler_job_events_total",
                (("event", "executed"), ("job", JOB)),
            )
            wait_until(
                lambda: scrape(metrics).get(executed, 0) >= 1,
                timeout=20,
                what=lambda: f"b to run the due job:\n{log_b.read_text()}",
            )
            b.send_signal(signal.SIGTERM)
            assert b.wait(10) == 0
    names = [b["metadata"]["name"] for b in velero_items(k8s, "backups")]
    assert len(names) == len(set(names))
    slots = sorted(dt.datetime.strptime(n.rsplit("-", 1)[1], "%Y%m%d%H%M%S") for n in names)
    expected = [slots[0] + dt.timedelta(minutes=i) for i in range(len(slots))]
    assert slots == expected, names  # every slot from the first on, each exactly once
    assert first_slot in names
