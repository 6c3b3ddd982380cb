"""The DR daemon: APScheduler 3.x with a persistent SQLAlchemy job store.

* Jobs have stable ids (``backup:<site>:<schedule>``, ``drill:<site>:<namespace>``,
  ``follow:<site>``, ``bsl:<site>``, ``placement``) and are (re)added with
  ``replace_existing``, so a restart keeps their next run times from the job store
  instead of duplicating them.
* Defaults: ``coalesce``, ``max_instances=1``, ``misfire_grace_time``.
* Backups are named per cron slot, so running a slot twice (restart, misfire,
  coalescing) creates nothing new: 409 means done.
* A backup job creates its Backup and returns; ``follow:<site>`` records how the
  site's Backups end (:mod:`gotthard.dr.follow`), so no worker thread waits on Velero.
* Only the Lease holder runs the scheduler; losing the Lease stops it. A SQLite job
  store is also guarded by an exclusive file lock: two APScheduler 3.x processes must
  never share one job store.
* Job failures are exceptions inside APScheduler's executor: logged, counted by the
  event listener, never fatal to the scheduler.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
)
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from kubernetes import client

from gotthard.dr import ops, placement
from gotthard.dr.follow import BackupFollower
from gotthard.dr.lease import LeaseElector
from gotthard.dr.metrics import DrMetrics
from gotthard.dr.scheduler import BatchingJobStore, DrScheduler, SlotExecutor, takes_slot
from gotthard.dr.settings import BackupSchedule, DrConfig, cron_trigger
from gotthard.files import open_private
from gotthard.kube import client_for

if TYPE_CHECKING:
    from gotthard.config import Config
    from gotthard.dr.velero import Outcome

log = logging.getLogger(__name__)

#: The running daemon, for the job functions (the job store keeps only their names and args).
_CURRENT: DrDaemon | None = None
JOB_PREFIXES = ("backup:", "drill:", "bsl:", "follow:", "placement")
_EVENTS = {
    EVENT_JOB_EXECUTED: "executed",
    EVENT_JOB_ERROR: "error",
    EVENT_JOB_MISSED: "missed",
    EVENT_JOB_MAX_INSTANCES: "max_instances",
}


class JobStoreLocked(RuntimeError):
    """Another process already uses this SQLite job store."""


_LOOKBACKS = (*(dt.timedelta(minutes=2 * 4**i) for i in range(10)), dt.timedelta(days=400))


#: (cron, timezone) -> (slot, the fire time after it): a slot holds until its next fire time
_SLOTS: dict[tuple[str, str], tuple[dt.datetime, dt.datetime]] = {}


def last_slot(cron: str, timezone: str, now: dt.datetime) -> dt.datetime:
    """The latest fire time of *cron* at or before *now* (the slot a run belongs to)."""
    known = _SLOTS.get((cron, timezone))
    if known is not None and known[0] <= now < known[1]:
        return known[0]  # schedules sharing a cron, and both sites of one, share the slot
    trigger = cron_trigger(cron, timezone)
    # look back over growing windows (2 min, 8 min, ... about 400 days), so that the walk
    # over fire times is short for a cron of any period: one to a few fire times a window
    for lookback in _LOOKBACKS:
        t = trigger.get_next_fire_time(None, now - lookback)
        last = None
        while t is not None and t <= now:
            last = t
            t = trigger.get_next_fire_time(t, t + dt.timedelta(seconds=1))
        if last is not None:
            slot = last.astimezone(dt.UTC)
            if t is not None:
                _SLOTS[(cron, timezone)] = (slot, t)
            return slot
    return now.astimezone(dt.UTC).replace(microsecond=0)


def _sqlite_path(url: str) -> str | None:
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return url.removeprefix("sqlite:///")
    return None


# -- job functions (module level: the job store references them by name) ----------------


def _daemon() -> DrDaemon:
    if _CURRENT is None:
        raise RuntimeError("no DR daemon is running in this process")
    return _CURRENT


@takes_slot
def backup_job(site: str, schedule: str, slot: dt.datetime | None = None) -> str:
    """Create the Backup of *schedule* at *site* for the cron *slot* the scheduler fired
    (default: the latest slot at or before now, for a run outside the scheduler)."""
    d = _daemon()
    sched = d.schedule(schedule)
    if slot is None:
        slot = last_slot(sched.cron, d.settings.timezone, ops.now_utc(d.ctx))
    # create and return: the site's follow job records how it ends (gotthard.dr.follow)
    name = ops.trigger_backup(d.ctx, site, sched, slot)
    d.follower.track(site, name, sched.name, d.ctx.clock())
    return name


def follow_job(site: str) -> int:
    """Record the outcome of the Backups of *site* that finished; how many did."""
    return len(_daemon().follow(site))


@takes_slot
def drill_job(site: str, namespace: str, slot: dt.datetime | None = None) -> bool:
    d = _daemon()
    spec = next(s for s in d.settings.drills if s.site == site and s.namespace == namespace)
    if slot is None:
        slot = last_slot(spec.cron, d.settings.timezone, ops.now_utc(d.ctx))
    report = ops.run_drill(d.ctx, spec, slot=slot)
    if not report.verified:
        raise RuntimeError(f"drill of {namespace} on {site} failed: {report.error}")
    return True


def bsl_job(site: str) -> dict[str, bool]:
    """BackupStorageLocation availability, RPO per namespace, and the last success of the
    schedules Velero fires itself (``velero_schedule = true``)."""
    return _bsl_check(_daemon(), site)


def _bsl_check(d: DrDaemon, site: str) -> dict[str, bool]:
    s = d.settings
    result = ops.check_storage_locations(d.ctx, site)
    covering = [sched for sched in s.schedules if sched.covers(site)]
    ops.refresh_rpo(
        d.ctx,
        site,
        sorted({ns for sched in covering for ns in sched.namespaces}),
        [sched.name for sched in covering if sched.velero_schedule],
    )
    return result


def placement_job() -> list[str]:
    return [str(x) for x in _daemon().evaluate_placement(apply=True)]


class DrDaemon:
    """The DR daemon of the Config *cfg*: its ``[dr]`` settings over its site model."""

    def __init__(
        self,
        cfg: Config,
        *,
        api_clients: Mapping[str, client.ApiClient] | None = None,
        karmada_api: client.ApiClient | None = None,
        metrics: DrMetrics | None = None,
        identity: str | None = None,
        clock: Callable[[], float] = time.time,
        health_source: Callable[[str], placement.SiteHealth] | None = None,
    ) -> None:
        settings = cfg.dr
        self.settings = settings
        self.metrics = metrics or DrMetrics()
        self.ctx = ops.Context(cfg, self.metrics, api_clients, clock=clock)
        self.metrics.record_schedules(settings, self.ctx.sites, clock())
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.karmada_api = karmada_api
        self.health_source = health_source
        self.scheduler: BackgroundScheduler | None = None
        self._schedules = {sched.name: sched for sched in settings.schedules}
        #: The unfinished Backups the scheduled backup jobs created, per site.
        self.follower = BackupFollower()
        #: The schedules the daemon fires itself: whose unfinished Backups a leader adopts.
        self._fired = frozenset(s.name for s in settings.schedules if not s.velero_schedule)
        #: The elector of the last :meth:`step` (None: no Lease, always leader).
        self.lease: LeaseElector | None = None
        self._lockfile: IO[bytes] | None = None
        self._stop = threading.Event()
        self.placement_state: dict[str, placement.ServiceState] = placement.load_state(
            settings.placement.state_file
        )

    # -- scheduler -----------------------------------------------------------------
    def _lock_jobstore(self) -> None:
        path = _sqlite_path(self.settings.jobstore_url)
        if path is None or self._lockfile is not None:
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        lock_fd = open_private(path + ".lock", os.O_WRONLY | os.O_APPEND)
        f = os.fdopen(lock_fd, "ab")  # held for the daemon's lifetime
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # SQLAlchemy would create the database with the umask's mode (often 0644); an
            # empty file is a valid SQLite database, and SQLite gives its journal and WAL
            # files the database's mode.
            os.close(open_private(path, os.O_RDWR))
        except BlockingIOError:
            f.close()
            raise JobStoreLocked(f"{path} is in use by another DR daemon") from None
        except OSError:
            f.close()
            raise
        self._lockfile = f

    def _unlock_jobstore(self) -> None:
        if self._lockfile is not None:
            fcntl.flock(self._lockfile, fcntl.LOCK_UN)
            self._lockfile.close()
            self._lockfile = None

    def schedule(self, name: str) -> BackupSchedule:
        """The backup schedule *name* of the settings."""
        return self._schedules[name]

    def follow(self, site: str) -> dict[str, Outcome | None]:
        """One round of following *site*'s unfinished Backups (:mod:`gotthard.dr.follow`)."""
        return self.follower.poll(self.ctx, site, self._fired)

    def build_scheduler(self) -> BackgroundScheduler:
        s = self.settings
        sched = DrScheduler(
            jobstores={"default": BatchingJobStore(url=s.jobstore_url)},
            executors={"default": SlotExecutor()},
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": int(s.misfire_grace_seconds),
            },
            timezone=s.timezone,
        )
        sched.add_listener(
            self._on_event,
            EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES,
        )
        return sched

    def _on_event(self, event: JobEvent) -> None:
        name = _EVENTS.get(event.code, str(event.code))
        self.metrics.scheduler_events.labels(event.job_id, name).inc()
        if event.code == EVENT_JOB_ERROR:
            log.error("job %s failed: %s", event.job_id, event.exception)

    def desired_jobs(self) -> dict[str, dict[str, Any]]:
        """Job id -> add_job keyword arguments, from the settings."""
        s, tz = self.settings, self.settings.timezone
        jobs: dict[str, dict[str, Any]] = {}
        followed: set[str] = set()  # the sites whose Backups the follow job follows
        for sched in s.schedules:
            if sched.velero_schedule:
                continue  # Velero's own Schedule fires these (synced at leader start-up)
            for site in sched.sites_in(self.ctx.sites):
                followed.add(site)
                jobs[f"backup:{site}:{sched.name}"] = {
                    "func": backup_job,
                    "trigger": cron_trigger(sched.cron, tz),
                    "kwargs": {"site": site, "schedule": sched.name},
                }
        for drill in s.drills:
            jobs[f"drill:{drill.site}:{drill.namespace}"] = {
                "func": drill_job,
                "trigger": cron_trigger(drill.cron, tz),
                "kwargs": {"site": drill.site, "namespace": drill.namespace},
            }
        for site in sorted(followed):
            jobs[f"follow:{site}"] = {
                "func": follow_job,
                "trigger": IntervalTrigger(seconds=s.follow_interval_seconds, timezone=tz),
                "kwargs": {"site": site},
            }
        for site in self.ctx.sites:
            jobs[f"bsl:{site}"] = {
                "func": bsl_job,
                "trigger": IntervalTrigger(minutes=5, timezone=tz),
                "kwargs": {"site": site},
            }
        if s.placement.enabled and s.placement.services:
            jobs["placement"] = {
                "func": placement_job,
                "trigger": IntervalTrigger(seconds=s.placement.interval_seconds, timezone=tz),
                "kwargs": {},
            }
        return jobs

    def sync_jobs(self, sched: BackgroundScheduler) -> None:
        """Add/replace the configured jobs, remove ours that left the configuration.

        An unchanged job keeps its persisted next run time (a restart does not reset
        or duplicate it); a changed trigger is replaced."""
        desired = self.desired_jobs()
        for job in sched.get_jobs():
            if job.id.startswith(JOB_PREFIXES) and job.id not in desired:
                sched.remove_job(job.id)
        for job_id, spec in desired.items():
            existing = sched.get_job(job_id)
            if (
                existing is not None
                and str(existing.trigger) == str(spec["trigger"])
                and existing.kwargs == spec["kwargs"]
            ):
                continue
            sched.add_job(id=job_id, name=job_id, replace_existing=True, **spec)

    def start_scheduler(self) -> BackgroundScheduler:
        global _CURRENT
        self._lock_jobstore()
        _CURRENT = self
        sched = self.build_scheduler()
        self.follower.reset()  # the first round adopts what a former leader left unfinished
        sched.start(paused=True)
        self.sync_jobs(sched)
        sched.resume()
        self.scheduler = sched
        # a schedule not yet run by this leader is judged from when it took over, not
        # from when the process started (DRBackupTooOld, DRDrillOverdue)
        self.metrics.record_schedules(self.settings, self.ctx.sites, self.ctx.clock())
        self.metrics.leader.set(1)
        return sched

    def stop_scheduler(self) -> None:
        global _CURRENT
        if self.scheduler is not None:
            # APScheduler 3.x's loop only skips processing while PAUSED: a wake-up still
            # pending when shutdown() sets STOPPED processes the due jobs once more, fails
            # to submit them to the shut-down executor, and yet advances their stored next
            # run time, so a slot would be lost without running. Pause, then detach the job
            # store (under the scheduler's lock), then shut down.
            self.scheduler.pause()
            self.scheduler.remove_jobstore("default")
            self.scheduler.shutdown(wait=False)
            self.scheduler = None
        if _CURRENT is self:
            _CURRENT = None
        self._unlock_jobstore()
        self.metrics.leader.set(0)
        # only the leader's judgement counts: DRSiteUnhealthy and DRServiceFailedOver
        # must never be kept alive by a former leader's frozen gauges
        self.metrics.forget_placement()

    # -- start-up chores -----------------------------------------------------------
    def startup_chores(self) -> None:
        """On becoming leader: delete orphaned drill namespaces (marking those drills
        failed), create/patch the Velero Schedules of the configuration, and check the
        BackupStorageLocations at once (then every 5 minutes, job ``bsl:<site>``).
        Failures are logged per site and never keep the scheduler from starting."""
        self.cleanup_orphans()
        self.sync_velero_schedules()
        for site in self.ctx.sites:
            try:
                _bsl_check(self, site)
            except Exception as err:
                log.error("storage location check on %s failed: %s", site, err)

    def sync_velero_schedules(self) -> dict[str, dict[str, str]]:
        done: dict[str, dict[str, str]] = {}
        for site in self.ctx.sites:
            try:
                done[site] = ops.sync_velero_schedules(self.ctx, site)
            except Exception as err:
                log.error("velero schedule sync on %s failed: %s", site, err)
        return done

    def cleanup_orphans(self) -> list[str]:
        cleaned: list[str] = []
        for site in self.ctx.sites:
            try:
                cleaned += ops.cleanup_orphans(self.ctx, site)
            except Exception as err:
                log.error("orphan clean-up on %s failed: %s", site, err)
        return cleaned

    # -- placement -----------------------------------------------------------------
    def evaluate_placement(self, apply: bool) -> list[placement.Decision]:
        p = self.settings.placement
        health = {}
        for site, conf in self.ctx.sites.items():
            if self.health_source is not None:
                health[site] = self.health_source(site)
            else:
                health[site] = placement.site_health(
                    site, conf.prometheus_of(conf.kube_cluster), p.queries
                )
            self.metrics.record_site_health(site, health[site].state(p.min_gpu_capacity))
        state, decisions = placement.decide(
            p.services, health, self.placement_state, self.ctx.clock(), p
        )
        by_name = {svc.name: svc for svc in p.services}
        primary = {name: svc.primary_site for name, svc in by_name.items()}
        self.metrics.record_placement(decisions, primary, self.ctx.sites)
        if apply:
            if self.karmada_api is None:
                self.karmada_api = karmada_client(self.settings)
            karmada = placement.Karmada(self.karmada_api, self.ctx.retry)
            for d in decisions:
                if d.changed:
                    log.warning("placement of %s: %s", d.service, d.reason)
                karmada.apply(
                    placement.propagation_policy(self.ctx.sites, by_name[d.service], *d.placed)
                )
            self.placement_state = state
            try:
                placement.save_state(p.state_file, state)
            except OSError as err:
                log.warning("cannot save placement state: %s", err)
        return decisions

    # -- main loop -----------------------------------------------------------------
    def leading(self) -> bool:
        """Acting as leader now: the scheduler runs and the Lease's local deadline has not
        passed (see :mod:`gotthard.dr.lease`)."""
        running = self.scheduler is not None and self.scheduler.running
        return running and (self.lease is None or self.lease.is_leader())

    def health(self) -> dict[str, Any]:
        return {"ok": True, "leader": self.leading(), "identity": self.identity}

    def elector(self) -> LeaseElector:
        lease = self.settings.lease
        return LeaseElector(
            self.ctx.api(lease.site or self.ctx.site),
            lease.namespace,
            lease.name,
            self.identity,
            lease.duration_seconds,
            clock=self.ctx.clock,
        )

    def step(self, elector: LeaseElector | None) -> bool:
        """One election round: start or stop the scheduler, export what the round saw of
        the Lease; returns leadership."""
        self.lease = elector
        leader = self._round(elector)
        if leader and self.scheduler is None:
            log.info("%s is leader: starting the scheduler", self.identity)
            self.startup_chores()
            leader = self._round(elector)  # the chores may outlast the Lease
            if leader:
                self.start_scheduler()
        elif not leader and self.scheduler is not None:
            log.warning("%s lost the lease: stopping the scheduler", self.identity)
            self.stop_scheduler()
        return leader

    def _round(self, elector: LeaseElector | None) -> bool:
        """One election round (:func:`_renew`), then what it saw of the Lease exported:
        every replica, leader or not, exports the Lease it reads (DRNoLeader judges it)."""
        leader = _renew(elector)
        if elector is not None:
            lease = self.settings.lease
            where = (lease.site or self.ctx.site, lease.namespace, lease.name)
            self.metrics.record_lease(self.ctx.site, elector.seen, where)
        return leader

    def run(self) -> None:
        elector = self.elector() if self.settings.lease.enabled else None
        try:
            while not self._stop.is_set():
                self.step(elector)
                self._stop.wait(self.settings.lease.renew_seconds)
        finally:
            self.stop_scheduler()
            if elector is not None:
                elector.release()

    def stop(self) -> None:
        self._stop.set()


def _renew(elector: LeaseElector | None) -> bool:
    """One election round (no elector: always leader); an API error means not leader."""
    try:
        return True if elector is None else elector.try_acquire()
    except Exception as err:
        log.error("lease check failed: %s", err)
        return False


def karmada_client(settings: DrConfig) -> client.ApiClient:
    """The Karmada control plane's API, from ``[dr.placement.karmada]``."""
    return client_for(settings.placement.karmada, "the Karmada control plane")
