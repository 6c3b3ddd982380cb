"""The DR daemon's Prometheus metrics and its ``/metrics`` + ``/healthz`` endpoint.

Names and labels are the ones the dashboards and alerts (docs/dashboards.md,
docs/alerts.md) already query. Series carry the ``site`` they describe; scrape the
daemon with ``honor_labels: true``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)


class DrMetrics:
    """All metric families of the DR daemon, on a private registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        sn = ("site", "namespace")
        self.backup_last_success = Gauge(
            "gotthard_dr_backup_last_success_timestamp_seconds",
            "Completion time of the last Completed Velero Backup (Unix seconds).",
            ("site", "schedule"),
            registry=r,
        )
        self.backup_duration = Gauge(
            "gotthard_dr_backup_duration_seconds",
            "Duration of the last finished Velero Backup (start to completion).",
            ("site", "schedule"),
            registry=r,
        )
        self.backups = Counter(
            "gotthard_dr_backups",
            "Velero Backups finished, by terminal phase (Completed, PartiallyFailed, Failed, "
            "FailedValidation, Timeout).",
            ("site", "schedule", "phase"),
            registry=r,
        )
        self.rpo = Gauge(
            "gotthard_dr_rpo_seconds",
            "Age of the newest Completed backup covering the namespace, at the last check.",
            sn,
            registry=r,
        )
        self.drill_last_success = Gauge(
            "gotthard_dr_drill_last_success",
            "1 if the last drill verified, else 0.",
            sn,
            registry=r,
        )
        self.drill_rto = Gauge(
            "gotthard_dr_drill_rto_seconds",
            "RTO of the last drill (start to verified).",
            sn,
            registry=r,
        )
        self.drill_rpo = Gauge(
            "gotthard_dr_drill_rpo_seconds",
            "RPO of the last drill (drill start minus backup completion).",
            sn,
            registry=r,
        )
        self.drill_last_timestamp = Gauge(
            "gotthard_dr_drill_last_timestamp_seconds",
            "When the last drill finished (Unix seconds).",
            sn,
            registry=r,
        )
        self.site_healthy = Gauge(
            "gotthard_dr_site_healthy",
            "1 if the placement controller judges the site healthy.",
            ("site",),
            registry=r,
        )
        self.placement = Gauge(
            "gotthard_dr_placement",
            "1 on the site a service is placed on, 0 elsewhere.",
            ("service", "site"),
            registry=r,
        )
        self.bsl_available = Gauge(
            "gotthard_dr_backup_storage_location_available",
            "1 if the Velero BackupStorageLocation is Available.",
            ("site", "location"),
            registry=r,
        )
        self.scheduler_events = Counter(
            "gotthard_dr_scheduler_job_events",
            "APScheduler job events (executed, error, missed, max_instances) by job id.",
            ("job", "event"),
            registry=r,
        )
        self.api_retries = Counter(
            "gotthard_dr_api_retries",
            "Kubernetes API calls retried after a transient failure.",
            ("operation",),
            registry=r,
        )
        self.leader = Gauge(
            "gotthard_dr_leader",
            "1 while this replica holds the Lease and runs the scheduler.",
            registry=r,
        )
        self.orphans_cleaned = Counter(
            "gotthard_dr_drill_orphans_cleaned",
            "Scratch namespaces of crashed drills deleted.",
            ("site",),
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """``/metrics`` (Prometheus text) and ``/healthz`` (JSON) on a background thread."""

    def __init__(
        self, metrics: DrMetrics, host: str, port: int, health: Callable[[], dict[str, Any]]
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype, code = outer.metrics.render(), CONTENT_TYPE_LATEST, 200
                elif path == "/healthz":
                    state = outer.health()
                    body = json.dumps(state).encode()
                    ctype, code = "application/json", 200 if state.get("ok") else 503
                else:
                    body, ctype, code = b"not found\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.metrics = metrics
        self.health = health
        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="dr-metrics", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
