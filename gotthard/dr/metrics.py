"""The DR daemon's Prometheus metrics and its ``/metrics`` + ``/healthz`` endpoint.

Names and labels are the ones the dashboards and alerts (docs/dashboards.md,
docs/alerts.md) already query. Series carry the ``site`` they describe; scrape the
daemon with ``honor_labels: true``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from gotthard import serve
from gotthard.exposition import render_registry

if TYPE_CHECKING:
    from gotthard.dr.lease import LeaseView
    from gotthard.dr.placement import Decision, HealthState
    from gotthard.dr.settings import DrConfig

_SITE_SCHEDULE = ("site", "schedule")
_SITE_NAMESPACE = ("site", "namespace")
#: Series judged against a recovery tier; ``tier`` is "" (absent) for an untiered namespace.
_SITE_NAMESPACE_TIER = ("site", "namespace", "tier")

#: (attribute, family type, metric name, labels, help) of every DR metric family, in
#: registration (and exposition) order.
_FAMILIES: tuple[tuple[str, type[Gauge | Counter], str, tuple[str, ...], str], ...] = (
    (
        "backup_last_success",
        Gauge,
        "gotthard_dr_backup_last_success_timestamp_seconds",
        _SITE_SCHEDULE,
        "Completion time of the last Completed Velero Backup (Unix seconds).",
    ),
    (
        "backup_duration",
        Gauge,
        "gotthard_dr_backup_duration_seconds",
        _SITE_SCHEDULE,
        "Duration of the last finished Velero Backup (start to completion).",
    ),
    (
        "backup_last_failure",
        Gauge,
        "gotthard_dr_backup_last_failure_timestamp_seconds",
        _SITE_SCHEDULE,
        "When the last Velero Backup that did not complete (PartiallyFailed, Failed, "
        "FailedValidation, Timeout) finished (Unix seconds).",
    ),
    (
        "backups",
        Counter,
        "gotthard_dr_backups",
        ("site", "schedule", "phase"),
        "Velero Backups finished, by terminal phase (Completed, PartiallyFailed, Failed, "
        "FailedValidation, Timeout).",
    ),
    (
        "backups_in_progress",
        Gauge,
        "gotthard_dr_backups_in_progress",
        ("site",),
        "Backups the scheduled jobs created (or the leader found unfinished when it took "
        "over) that have not finished yet.",
    ),
    (
        "rpo",
        Gauge,
        "gotthard_dr_rpo_seconds",
        _SITE_NAMESPACE_TIER,
        "Age of the newest Completed backup covering the namespace, at the last check.",
    ),
    (
        "rto",
        Gauge,
        "gotthard_dr_rto_seconds",
        _SITE_NAMESPACE_TIER,
        "Recovery time measured by the namespace's last verified drill.",
    ),
    (
        "tier_breach",
        Gauge,
        "gotthard_dr_tier_breach",
        ("site", "namespace", "tier", "objective"),
        "1 if the namespace misses its recovery tier's objective (rpo or rto), else 0.",
    ),
    (
        "drill_last_success",
        Gauge,
        "gotthard_dr_drill_last_success",
        _SITE_NAMESPACE,
        "1 if the last drill verified, else 0.",
    ),
    (
        "drill_rto",
        Gauge,
        "gotthard_dr_drill_rto_seconds",
        _SITE_NAMESPACE,
        "RTO of the last drill (start to verified).",
    ),
    (
        "drill_rpo",
        Gauge,
        "gotthard_dr_drill_rpo_seconds",
        _SITE_NAMESPACE,
        "RPO of the last drill (drill start minus backup completion).",
    ),
    (
        "drill_last_timestamp",
        Gauge,
        "gotthard_dr_drill_last_timestamp_seconds",
        _SITE_NAMESPACE,
        "When the last drill finished (Unix seconds).",
    ),
    (
        "site_healthy",
        Gauge,
        "gotthard_dr_site_healthy",
        ("site",),
        "1 if the placement controller judges the site healthy, 0 on evidence that it "
        "fails; no series while its health is unknown.",
    ),
    (
        "site_health_unknown",
        Gauge,
        "gotthard_dr_site_health_unknown",
        ("site",),
        "1 while the placement controller has no data on the site's health (its "
        "Prometheus unreachable or without an answer): not a reason to fail over.",
    ),
    (
        "placement",
        Gauge,
        "gotthard_dr_placement",
        ("service", "site"),
        "1 on each site a service is placed on, 0 elsewhere.",
    ),
    (
        "failed_over",
        Gauge,
        "gotthard_dr_service_failed_over",
        ("service", "primary_site", "site"),
        "1 while a service runs off its primary site (failover mode) or on fewer than all "
        "sites (spread mode), per site it runs on; 0 on its primary while it is not.",
    ),
    (
        "bsl_available",
        Gauge,
        "gotthard_dr_backup_storage_location_available",
        ("site", "location"),
        "1 if the Velero BackupStorageLocation is Available.",
    ),
    (
        "scheduler_events",
        Counter,
        "gotthard_dr_scheduler_job_events",
        ("job", "event"),
        "APScheduler job events (executed, error, missed, max_instances) by job id.",
    ),
    (
        "api_retries",
        Counter,
        "gotthard_dr_api_retries",
        ("operation",),
        "Kubernetes API calls retried after a transient failure.",
    ),
    (
        "leader",
        Gauge,
        "gotthard_dr_leader",
        (),
        "1 while this replica holds the Lease and runs the scheduler.",
    ),
    (
        "lease_renewed",
        Gauge,
        "gotthard_dr_lease_renew_timestamp_seconds",
        ("site",),
        "The Lease's renewTime (Unix seconds) as this replica last read or wrote it.",
    ),
    (
        "lease_duration",
        Gauge,
        "gotthard_dr_lease_duration_seconds",
        ("site",),
        "The Lease's leaseDurationSeconds as this replica last read or wrote it.",
    ),
    (
        "lease_read",
        Gauge,
        "gotthard_dr_lease_read_timestamp_seconds",
        ("site",),
        "When this replica last read (or wrote) the Lease (Unix seconds): how fresh the "
        "other gotthard_dr_lease_* series are.",
    ),
    (
        "lease_holder",
        Gauge,
        "gotthard_dr_lease_holder_info",
        ("site", "holder", "lease_site", "lease_namespace", "lease_name"),
        "1 for the Lease's holderIdentity as this replica last read or wrote it; the "
        "Lease is lease_name in lease_namespace on the Kubernetes cluster of lease_site.",
    ),
    (
        "schedule_period",
        Gauge,
        "gotthard_dr_schedule_period_seconds",
        ("site", "schedule", "namespace"),
        "Longest gap between two runs of the backup schedule's cron, per namespace it covers.",
    ),
    (
        "schedule_loaded",
        Gauge,
        "gotthard_dr_schedule_loaded_timestamp_seconds",
        _SITE_SCHEDULE,
        "When the daemon loaded the backup schedule (Unix seconds): the age of a schedule "
        "that has not succeeded yet.",
    ),
    (
        "drill_period",
        Gauge,
        "gotthard_dr_drill_period_seconds",
        _SITE_NAMESPACE,
        "Longest gap between two runs of the drill's cron.",
    ),
    (
        "drill_loaded",
        Gauge,
        "gotthard_dr_drill_loaded_timestamp_seconds",
        _SITE_NAMESPACE,
        "When the daemon loaded the drill (Unix seconds): the age of a drill not run yet.",
    ),
    (
        "orphans_cleaned",
        Counter,
        "gotthard_dr_drill_orphans_cleaned",
        ("site",),
        "Scratch namespaces of crashed drills deleted.",
    ),
)


class DrMetrics:
    """All metric families of the DR daemon (:data:`_FAMILIES`), on a private registry."""

    backup_last_success: Gauge
    backup_last_failure: Gauge
    backup_duration: Gauge
    backups: Counter
    backups_in_progress: Gauge
    rpo: Gauge
    rto: Gauge
    tier_breach: Gauge
    drill_last_success: Gauge
    drill_rto: Gauge
    drill_rpo: Gauge
    drill_last_timestamp: Gauge
    site_healthy: Gauge
    site_health_unknown: Gauge
    placement: Gauge
    failed_over: Gauge
    bsl_available: Gauge
    scheduler_events: Counter
    api_retries: Counter
    leader: Gauge
    lease_renewed: Gauge
    lease_duration: Gauge
    lease_read: Gauge
    lease_holder: Gauge
    schedule_period: Gauge
    schedule_loaded: Gauge
    drill_period: Gauge
    drill_loaded: Gauge
    orphans_cleaned: Counter

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        for attribute, family, name, labels, help_text in _FAMILIES:
            setattr(self, attribute, family(name, help_text, labels, registry=self.registry))
        #: The label values of each service's failed_over series, to remove stale ones.
        self._failed_over: dict[str, set[tuple[str, str, str]]] = {}
        #: The label values of the lease_holder series, to remove it when the holder changes.
        self._lease_holder: tuple[str, ...] | None = None

    def render(self) -> str:
        return render_registry(self.registry)

    def record_site_health(self, site: str, state: HealthState) -> None:
        """One evaluation's judgement of *site*: ``gotthard_dr_site_healthy`` 1 or 0 on
        evidence, removed while unknown (``gotthard_dr_site_health_unknown`` 1), so that
        no data never reads as a failed site."""
        unknown = state == "unknown"
        self.site_health_unknown.labels(site).set(1 if unknown else 0)
        if unknown:
            with contextlib.suppress(KeyError):
                self.site_healthy.remove(site)
        else:
            self.site_healthy.labels(site).set(1 if state == "healthy" else 0)

    def record_placement(
        self, decisions: Iterable[Decision], primary: Mapping[str, str], sites: Iterable[str]
    ) -> None:
        """The placement of each decided service: ``gotthard_dr_placement`` per site, and
        ``gotthard_dr_service_failed_over`` (*primary*: service -> its primary site).

        A service is failed over while it runs off its primary (failover mode) or on
        fewer sites than configured (spread mode, degraded); then the series of each site
        it runs on is 1, else the one of its primary is 0. Series of a former placement
        are removed, not left at a stale value."""
        sites = list(sites)
        for d in decisions:
            for site in sites:
                self.placement.labels(d.service, site).set(1 if site in d.placed else 0)
            home = primary[d.service]
            degraded = set(d.placed) < set(sites) if d.mode == "spread" else d.site != home
            running = {(d.service, home, site) for site in d.placed}
            current = running if degraded else {(d.service, home, home)}
            for stale in self._failed_over.get(d.service, set()) - current:
                self.failed_over.remove(*stale)
            for labels in current:
                self.failed_over.labels(*labels).set(1 if degraded else 0)
            self._failed_over[d.service] = current

    def forget_placement(self) -> None:
        """Remove the placement controller's series (``gotthard_dr_site_healthy``,
        ``gotthard_dr_placement``, ``gotthard_dr_service_failed_over``): a replica that
        no longer leads judges nothing, and its last judgement must not stay exported as
        if it were current (the new leader exports its own)."""
        for family in (self.site_healthy, self.placement, self.failed_over):
            family.clear()
        self._failed_over.clear()

    def record_lease(
        self, site: str, seen: LeaseView | None, where: tuple[str, str, str] = ("", "", "")
    ) -> None:
        """What the replica at *site* last read (or wrote) of the Lease: its renew time,
        duration and holder, and when it read them, every round, leader or not. Nothing
        read yet: nothing exported; a round that could not read it leaves the last values,
        read time included, so that DRNoLeader stops judging an old view (no news is not
        news of a leaderless DR). A former holder's series is removed. *where* is the
        Lease's (site, namespace, name), for the runbook's ``kubectl get lease``."""
        if seen is None:
            return
        if seen.renewed is not None:
            self.lease_renewed.labels(site).set(seen.renewed)
        self.lease_duration.labels(site).set(seen.duration)
        self.lease_read.labels(site).set(seen.read)
        holder = (site, seen.holder, *where)
        if self._lease_holder not in (None, holder):
            self.lease_holder.remove(*self._lease_holder)
        self.lease_holder.labels(*holder).set(1)
        self._lease_holder = holder

    def record_schedules(self, settings: DrConfig, sites: Iterable[str], now: float) -> None:
        """Each backup schedule's and drill's period (from its cron) and load time, at
        each of *sites* (the site model's) it covers.

        The alerts compare the age of the last success with the period, so a schedule
        that has never succeeded (no last-success series) is judged from *now*.
        """
        for schedule in settings.schedules:
            period = cron_period_seconds(schedule.cron, settings.timezone)
            for site in schedule.sites_in(sites):
                self.schedule_loaded.labels(site, schedule.name).set(now)
                for namespace in schedule.namespaces:
                    self.schedule_period.labels(site, schedule.name, namespace).set(period)
        for drill in settings.drills:
            self.drill_period.labels(drill.site, drill.namespace).set(
                cron_period_seconds(drill.cron, settings.timezone)
            )
            self.drill_loaded.labels(drill.site, drill.namespace).set(now)


#: How many runs ahead :func:`cron_period_seconds` looks: enough for a weekly or monthly
#: cron's irregular gaps.
_RUNS = 64


@functools.lru_cache(maxsize=4096)
def cron_period_seconds(cron: str, timezone: str = "UTC") -> float:
    """The longest gap between two consecutive runs of *cron* over its next runs (kept per
    cron: :data:`_RUNS` runs cover a cron's irregular gaps from whenever they start, and
    schedules often share a cron)."""
    from gotthard.dr.settings import cron_trigger

    trigger = cron_trigger(cron, timezone)
    previous: dt.datetime | None = None
    current = dt.datetime.now(dt.UTC)
    longest = 0.0
    for _ in range(_RUNS):
        fire = trigger.get_next_fire_time(previous, current)
        if fire is None:
            break
        if previous is not None:
            longest = max(longest, (fire - previous).total_seconds())
        previous, current = fire, fire + dt.timedelta(seconds=1)
    return longest


class MetricsServer(serve.Server):
    """``/metrics`` (Prometheus text) and ``/healthz`` (JSON, 503 when not ok) in the background.

    ``web`` is the optional exporter-toolkit web config (TLS, basic auth, headers).
    """

    def __init__(
        self,
        metrics: DrMetrics,
        host: str,
        port: int,
        health: Callable[[], dict[str, Any]],
        *,
        web: serve.WebConfig | None = None,
    ) -> None:
        self.metrics = metrics
        self.health = health
        routes = {serve.METRICS_ROUTE: self._metrics, serve.HEALTH_ROUTE: self._healthz}
        super().__init__(
            (host, port),
            routes,
            web=web,
            name="dr-metrics",
            not_found=lambda _: serve.text(404, "not found\n", "text/plain"),
        )

    def _metrics(self, request: serve.Request) -> serve.Response:
        return serve.exposition(self.metrics.render())

    def _healthz(self, request: serve.Request) -> serve.Response:
        state = self.health()
        return serve.json_response(200 if state.get("ok") else 503, state)

    def stop(self) -> None:
        self.close()
