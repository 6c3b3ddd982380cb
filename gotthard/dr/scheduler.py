"""The DR daemon's scheduler: APScheduler 3.x, with each pass's writes batched and each
run told its slot.

**Each run is told its slot.** A backup or drill is named after the cron slot it belongs
to. APScheduler knows that slot (the run time it fires), but calls the job function with
its stored arguments only; working the slot out again from the clock costs a walk over
the cron's fire times per run, which for 1,000 schedules due together was most of the
pass. :class:`SlotExecutor` passes the fired run time as ``slot=`` to the functions
marked :func:`takes_slot` when it is one of the trigger's fire times, so a late run
(within the misfire grace time) still belongs to the slot it was fired for; a run time
set by hand ("run it now") is not a slot, and the job works its slot out from the clock.

**Batched writes.**
APScheduler writes a job's next run time after submitting it, one transaction per job.
With 1,000 backup schedules due in the same minute, that is 1,000 commits (each an fsync
on SQLite) inside one scheduling pass: seconds before the next pass can start. Here the
pass's next-run writes are kept and written in one transaction when the pass asks the
store for its next wake-up (and at the latest when the pass ends).

What a crash between a job's submission and that write costs is the same as before,
only for a wider window: the slot runs again after a restart, and backups are named per
cron slot (``gotthard.dr.ops``), so running it again creates nothing new.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import pickle
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.job import Job
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.util import datetime_to_utc_timestamp
from sqlalchemy import bindparam

__all__ = ["BatchingJobStore", "DrScheduler", "SlotExecutor", "takes_slot"]

log = logging.getLogger(__name__)


class BatchingJobStore(SQLAlchemyJobStore):
    """A SQLAlchemy job store whose updates made by the scheduling thread during a pass
    (:meth:`batch`) are written together by :meth:`flush`. Updates from any other thread
    (an operator's ``modify_job``) are written at once, as APScheduler does."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pending: dict[str, dict[str, Any]] = {}
        self._batching: int | None = None  # the thread id of the pass that batches

    def batch(self) -> None:
        """Keep this thread's updates until :meth:`flush`."""
        self._batching = threading.get_ident()

    def update_job(self, job: Job) -> None:
        if self._batching != threading.get_ident():
            super().update_job(job)
            return
        self._pending[job.id] = {
            "_id": job.id,
            "next_run_time": datetime_to_utc_timestamp(job.next_run_time),
            "job_state": pickle.dumps(job.__getstate__(), self.pickle_protocol),
        }

    def flush(self) -> None:
        """Write the kept updates in one transaction and stop batching."""
        self._batching = None
        pending, self._pending = list(self._pending.values()), {}
        if not pending:
            return
        update = (
            self.jobs_t.update()
            .where(self.jobs_t.c.id == bindparam("_id"))
            .values(next_run_time=bindparam("next_run_time"), job_state=bindparam("job_state"))
        )
        with self.engine.begin() as connection:
            result = connection.execute(update, pending)
        if result.rowcount is not None and 0 <= result.rowcount < len(pending):
            # a job removed while its pass ran has no row left to update: nothing to keep
            log.info(
                "%d job(s) left the store during a scheduling pass", len(pending) - result.rowcount
            )

    def get_next_run_time(self) -> Any:
        # the pass asks for its next wake-up after its updates: they must be written first
        self.flush()
        return super().get_next_run_time()

    def lookup_job(self, job_id: str) -> Job | None:
        if self._batching == threading.get_ident():
            self.flush()
        return super().lookup_job(job_id)


class DrScheduler(BackgroundScheduler):
    """APScheduler's background scheduler with each pass's job store writes batched."""

    def _process_jobs(self) -> float | None:
        stores = [s for s in self._jobstores.values() if isinstance(s, BatchingJobStore)]
        for store in stores:
            store.batch()
        try:
            return super()._process_jobs()
        finally:
            for store in stores:
                store.flush()


F = TypeVar("F", bound=Callable[..., Any])


def takes_slot(func: F) -> F:
    """Mark a job function that takes the run's cron slot as ``slot=`` (:class:`SlotExecutor`)."""
    func.__gotthard_slot__ = True  # type: ignore[attr-defined]
    return func


@dataclass(frozen=True, slots=True)
class _Run:
    """What APScheduler's ``run_job`` reads of a job, with the slot bound to its function."""

    id: str
    func: Callable[..., Any]
    args: Sequence[Any]
    kwargs: dict[str, Any]
    misfire_grace_time: float | None
    _jobstore_alias: str


class SlotExecutor(ThreadPoolExecutor):
    """A thread pool executor that passes the fired run time (the slot) to
    :func:`takes_slot` functions. With ``coalesce`` (the daemon's default) a run has one
    run time; were there several, each would be given the latest."""

    def _do_submit_job(self, job: Job, run_times: list[dt.datetime]) -> None:
        run_time = run_times[-1] if run_times else None
        # a run time the trigger fires is the slot; one set by hand (``modify_job`` to
        # run now) is not, and the job works its slot out from the clock as before
        if (
            run_time is not None
            and getattr(job.func, "__gotthard_slot__", False)
            and job.trigger.get_next_fire_time(None, run_time) == run_time
        ):
            slot = run_time.astimezone(dt.UTC)
            job = _Run(  # type: ignore[assignment]
                job.id,
                functools.partial(job.func, slot=slot),
                job.args,
                job.kwargs,
                job.misfire_grace_time,
                job._jobstore_alias,
            )
        super()._do_submit_job(job, run_times)
