"""The DR dashboard: Velero backups, restore drills and Zurich/Lugano placement."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.monitoring.components.dr import (
    BACKUP_GRACE,
    DRILL_PASSED,
    DRILL_RPO,
    DRILL_RTO,
    LAST_BACKUP,
    RTO_TARGET,
    SCHEDULE_PERIOD,
    SITE_HEALTHY,
)
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.shared import rate, sel
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = "Velero backups, DR drills with measured RTO and RPO, and Zurich/Lugano placement."
TAGS = ("dr",)
#: Per namespace: the drill and RPO series carry ``site`` and ``namespace``.
NAMESPACE = "{{site}} {{namespace}}"


def _site_health() -> ui.Query:
    return ui.Query(f"min by (site) ({sel(SITE_HEALTHY)})", "{{site}}")


def _per_namespace(metric: str) -> str:
    return f"max by (site, namespace) ({sel(metric)})"


def disaster_recovery(t: ThresholdValues) -> Dashboard:
    too_old = ((t[BACKUP_GRACE], "red"),)
    # how far each schedule's last success is past the schedule's period
    lateness = (
        f"max by (site, schedule) (time() - {sel(LAST_BACKUP)})"
        f"\n- max by (site, schedule) ({sel(SCHEDULE_PERIOD)})"
    )
    rto = ((t[RTO_TARGET], "red"),)
    passing = f"sum({sel(DRILL_PASSED)}) / count({sel(DRILL_PASSED)})"
    board = ui.Board()
    board.stats(
        ui.stat(
            "Site health",
            "none",
            _site_health(),
            mappings=(ui.HEALTHY,),
            description="The placement controller's verdict on each site.",
        ),
        ui.stat(
            "Most overdue backup schedule",
            "s",
            ui.Query(f"max({lateness})", "late by"),
            thresholds=too_old,
        ),
        ui.stat("Drills passing", "percentunit", ui.Query(passing, "passing")),
        ui.stat("Worst drill RTO", "s", ui.Query(f"max({sel(DRILL_RTO)})", "RTO"), thresholds=rto),
    )
    board.row(
        ui.timeseries(
            "Backup age past the schedule's period",
            "s",
            ui.Query(lateness, "{{site}} {{schedule}}"),
            description="DRBackupTooOld fires above the line (the schedule's grace).",
            lines=too_old,
        ),
        ui.gauge_timeseries(
            "Backup duration", "s", "gotthard_dr_backup_duration_seconds", "{{site}} {{schedule}}"
        ),
    )
    board.row(
        ui.timeseries(
            "Backups by phase",
            "short",
            ui.Query(
                f"sum by (site, phase) ({rate('gotthard_dr_backups_total', fn='increase')})",
                "{{site}} {{phase}}",
            ),
            stack=True,
        ),
        ui.gauge_timeseries(
            "RPO by namespace",
            "s",
            "gotthard_dr_rpo_seconds",
            NAMESPACE,
            description="Now minus the time of the namespace's latest usable backup.",
        ),
    )
    board.row(
        ui.table(
            "Drills",
            "s",
            ui.Query(
                _per_namespace(DRILL_PASSED),
                name="last drill",
                unit="none",
                mappings=(ui.PASS_FAIL,),
            ),
            ui.Query(_per_namespace(DRILL_RTO), name="RTO"),
            ui.Query(_per_namespace(DRILL_RPO), name="RPO"),
            ui.Query(
                "time() - " + _per_namespace("gotthard_dr_drill_last_timestamp_seconds"),
                name="since last drill",
            ),
            sort_by="RTO",
        )
    )
    board.row(
        ui.gauge_timeseries(
            "Drill RTO",
            "s",
            DRILL_RTO,
            NAMESPACE,
            description="DRRTOOverTarget fires above the line (the RTO target).",
            lines=rto,
        ),
        ui.gauge_timeseries("Drill RPO", "s", DRILL_RPO, NAMESPACE),
        ui.timeseries("Site health over time", "none", _site_health()),
    )
    board.row(
        ui.label_table(
            "Placement",
            f"max by (service, site) ({sel('gotthard_dr_placement')})",
            "placed",
            description="Where each service runs now (Karmada PropagationPolicy).",
            sort_by="service",
        )
    )
    return ui.dashboard("dr", DESCRIPTION, TAGS, board)
