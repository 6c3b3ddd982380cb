"""The DR daemon's scheduler: a pass's next run times reach the job store, and each run
is told the cron slot it was fired for."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import sqlalchemy
from apscheduler.triggers.cron import CronTrigger

from gotthard.dr.scheduler import BatchingJobStore, DrScheduler, SlotExecutor, takes_slot
from tests.support.wait import wait_until

SEEN: list[tuple[str, dt.datetime | None]] = []
DONE = threading.Event()


@takes_slot
def record(name: str, slot: dt.datetime | None = None) -> None:
    SEEN.append((name, slot))
    if len(SEEN) >= 3:
        DONE.set()


def stored_next_runs(url: str) -> dict[str, float]:
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sqlalchemy.text("SELECT id, next_run_time FROM apscheduler_jobs"))
        return {row[0]: row[1] for row in rows}


def test_a_pass_writes_every_next_run_and_tells_each_run_its_slot(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    sched = DrScheduler(
        jobstores={"default": BatchingJobStore(url=url)},
        executors={"default": SlotExecutor()},
        job_defaults={"coalesce": True, "misfire_grace_time": 2 * 86400},
        timezone="UTC",
    )
    sched.start(paused=True)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    # today's daily slot, fired late (within the grace time)
    slot = now.replace(hour=0, minute=0, second=0)
    trigger = CronTrigger.from_crontab("0 0 * * *", timezone="UTC")
    sched.add_job(record, trigger, id="late", args=["late"], next_run_time=slot)
    sched.add_job(record, trigger, id="by-hand", args=["by-hand"], next_run_time=now)
    sched.add_job(record, trigger, id="other", args=["other"], next_run_time=slot)
    sched.resume()
    try:
        wait_until(DONE.is_set, timeout=20, what="three runs")
    finally:
        sched.shutdown(wait=True)
    slots = dict(SEEN)
    assert slots["late"] == slots["other"] == slot  # the slot it was fired for, not now
    assert slots["by-hand"] is None  # not a fire time: the job works it out itself
    # every run's next run time is in the store, past the run: a restart does not re-run it
    stored = stored_next_runs(url)
    assert set(stored) == {"late", "by-hand", "other"}
    assert all(value > now.timestamp() for value in stored.values()), stored
