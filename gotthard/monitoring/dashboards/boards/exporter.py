"""The exporters dashboard: Gotthard's own exporters, their scrapes and collectors."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.shared import count_zero, rate, sel
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = "Gotthard's own exporters: scrape health, collector state, poll duration, errors."
TAGS = ("meta",)


def _per_collector(metric: str) -> str:
    return f"max by (site, cluster, instance, collector) ({sel(metric)})"


def exporter_health(t: ThresholdValues) -> Dashboard:
    board = ui.Board()
    board.stats(
        ui.problem_stat("Scrape targets down", count_zero("up"), "down"),
        ui.problem_stat("Collectors down", count_zero("gotthard_collector_up"), "down"),
        ui.problem_stat(
            "Collectors serving stale data", f"sum({sel('gotthard_collector_stale')})", "stale"
        ),
    )
    board.row(
        ui.table(
            "Collectors",
            "none",
            ui.Query(_per_collector("gotthard_collector_up"), name="up", mappings=(ui.UP_DOWN,)),
            ui.Query(_per_collector("gotthard_collector_stale"), name="stale"),
            ui.Query(
                "time() - " + _per_collector("gotthard_collector_last_success_timestamp_seconds"),
                name="since last good poll",
                unit="s",
            ),
            ui.Query(
                _per_collector("gotthard_collector_duration_seconds"),
                name="poll duration",
                unit="s",
            ),
        )
    )
    board.row(
        ui.gauge_timeseries(
            "Poll duration",
            "s",
            "gotthard_collector_duration_seconds",
            "{{instance}} {{collector}}",
        ),
        ui.timeseries(
            "Collector errors",
            "cps",
            ui.Query(
                f"sum by (instance, collector) ({rate('gotthard_collector_errors_total')})",
                "{{instance}} {{collector}}",
            ),
        ),
    )
    board.row(
        ui.gauge_timeseries(
            "Scrape duration", "s", "scrape_duration_seconds", "{{job}} {{instance}}"
        ),
        ui.gauge_timeseries(
            "Samples per scrape", "short", "scrape_samples_scraped", "{{job}} {{instance}}"
        ),
    )
    build = "site, cluster, instance, version, python_version"
    board.row(
        ui.table(
            "Exporter versions",
            "none",
            ui.Query(f"max by ({build}) ({sel('gotthard_build_info')})", name="build"),
            hide=("Time", "Value"),
        )
    )
    return ui.dashboard("exporters", DESCRIPTION, TAGS, board)
