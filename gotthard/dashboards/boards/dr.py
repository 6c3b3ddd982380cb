"""The DR dashboard: Velero backups, restore drills and Zurich/Lugano placement."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.dashboards.panels import (
    HEALTHY,
    PASS_FAIL,
    Board,
    Query,
    dashboard,
    gauge_timeseries,
    label_table,
    rate,
    sel,
    stat,
    table,
    timeseries,
)

NAME = "DR"
DESCRIPTION = "Velero backups, DR drills with measured RTO and RPO, and Zurich/Lugano placement."
TAGS = ("dr",)
LAST_BACKUP = "gotthard_dr_backup_last_success_timestamp_seconds"
DRILL_PASSED = "gotthard_dr_drill_last_success"
DRILL_RTO = "gotthard_dr_drill_rto_seconds"
DRILL_RPO = "gotthard_dr_drill_rpo_seconds"
#: Per namespace: the drill and RPO series carry ``site`` and ``namespace``.
NAMESPACE = "{{site}} {{namespace}}"


def _site_health() -> Query:
    return Query(f"min by (site) ({sel('gotthard_dr_site_healthy')})", "{{site}}")


def _per_namespace(metric: str) -> str:
    return f"max by (site, namespace) ({sel(metric)})"


def disaster_recovery() -> Dashboard:
    passing = f"sum({sel(DRILL_PASSED)}) / count({sel(DRILL_PASSED)})"
    board = Board()
    board.stats(
        stat(
            "Site health",
            "none",
            _site_health(),
            mappings=(HEALTHY,),
            description="The placement controller's verdict on each site.",
        ),
        stat(
            "Oldest successful backup",
            "s",
            Query(f"max(time() - {sel(LAST_BACKUP)})", "age"),
            thresholds=((86400.0, "orange"), (172800.0, "red")),
        ),
        stat("Drills passing", "percentunit", Query(passing, "passing")),
        stat("Worst drill RTO", "s", Query(f"max({sel(DRILL_RTO)})", "RTO")),
    )
    board.row(
        timeseries(
            "Backup age by schedule",
            "s",
            Query(f"time() - {sel(LAST_BACKUP)}", "{{site}} {{schedule}}"),
        ),
        gauge_timeseries(
            "Backup duration", "s", "gotthard_dr_backup_duration_seconds", "{{site}} {{schedule}}"
        ),
    )
    board.row(
        timeseries(
            "Backups by phase",
            "short",
            Query(
                f"sum by (site, phase) ({rate('gotthard_dr_backups_total', fn='increase')})",
                "{{site}} {{phase}}",
            ),
            stack=True,
        ),
        gauge_timeseries(
            "RPO by namespace",
            "s",
            "gotthard_dr_rpo_seconds",
            NAMESPACE,
            description="Now minus the time of the namespace's latest usable backup.",
        ),
    )
    board.row(
        table(
            "Drills",
            "s",
            Query(
                _per_namespace(DRILL_PASSED),
                name="last drill",
                unit="none",
                mappings=(PASS_FAIL,),
            ),
            Query(_per_namespace(DRILL_RTO), name="RTO"),
            Query(_per_namespace(DRILL_RPO), name="RPO"),
            Query(
                "time() - " + _per_namespace("gotthard_dr_drill_last_timestamp_seconds"),
                name="since last drill",
            ),
            sort_by="RTO",
        )
    )
    board.row(
        gauge_timeseries("Drill RTO", "s", DRILL_RTO, NAMESPACE),
        gauge_timeseries("Drill RPO", "s", DRILL_RPO, NAMESPACE),
        timeseries("Site health over time", "none", _site_health()),
    )
    board.row(
        label_table(
            "Placement",
            f"max by (service, site) ({sel('gotthard_dr_placement')})",
            "placed",
            description="Where each service runs now (Karmada PropagationPolicy).",
            sort_by="service",
        )
    )
    return dashboard(NAME, DESCRIPTION, TAGS, board)
