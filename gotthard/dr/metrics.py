"""The DR daemon's Prometheus metrics and its ``/metrics`` + ``/healthz`` endpoint.

Names and labels are the ones the dashboards and alerts (docs/dashboards.md,
docs/alerts.md) already query. Series carry the ``site`` they describe; scrape the
daemon with ``honor_labels: true``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from gotthard.serve import Request, Response, Server, WebConfig, json_response, text

_SITE_SCHEDULE = ("site", "schedule")
_SITE_NAMESPACE = ("site", "namespace")

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
        "backups",
        Counter,
        "gotthard_dr_backups",
        ("site", "schedule", "phase"),
        "Velero Backups finished, by terminal phase (Completed, PartiallyFailed, Failed, "
        "FailedValidation, Timeout).",
    ),
    (
        "rpo",
        Gauge,
        "gotthard_dr_rpo_seconds",
        _SITE_NAMESPACE,
        "Age of the newest Completed backup covering the namespace, at the last check.",
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
        "1 if the placement controller judges the site healthy.",
    ),
    (
        "placement",
        Gauge,
        "gotthard_dr_placement",
        ("service", "site"),
        "1 on the site a service is placed on, 0 elsewhere.",
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
    backup_duration: Gauge
    backups: Counter
    rpo: Gauge
    drill_last_success: Gauge
    drill_rto: Gauge
    drill_rpo: Gauge
    drill_last_timestamp: Gauge
    site_healthy: Gauge
    placement: Gauge
    bsl_available: Gauge
    scheduler_events: Counter
    api_retries: Counter
    leader: Gauge
    orphans_cleaned: Counter

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        for attribute, family, name, labels, help_text in _FAMILIES:
            setattr(self, attribute, family(name, help_text, labels, registry=self.registry))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer(Server):
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
        web: WebConfig | None = None,
    ) -> None:
        self.metrics = metrics
        self.health = health
        routes = {"GET /metrics": self._metrics, "GET /healthz": self._healthz}
        super().__init__(
            (host, port),
            routes,
            web=web,
            name="dr-metrics",
            not_found=lambda _: text(404, "not found\n", "text/plain"),
        )

    def _metrics(self, request: Request) -> Response:
        return 200, [("Content-Type", CONTENT_TYPE_LATEST)], self.metrics.render()

    def _healthz(self, request: Request) -> Response:
        state = self.health()
        return json_response(200 if state.get("ok") else 503, state)

    def stop(self) -> None:
        self.close()
