"""The exporters dashboard: Gotthard's own exporters, their scrapes and collectors."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.dashboards.panels import (
    UP_DOWN,
    Board,
    Query,
    count_zero,
    dashboard,
    gauge_timeseries,
    problem_stat,
    rate,
    sel,
    table,
    timeseries,
)

NAME = "Exporters"
DESCRIPTION = "Gotthard's own exporters: scrape health, collector state, poll duration, errors."
TAGS = ("meta",)


def _per_collector(metric: str) -> str:
    return f"max by (site, cluster, instance, collector) ({sel(metric)})"


def exporter_health() -> Dashboard:
    board = Board()
    board.stats(
        problem_stat("Scrape targets down", count_zero("up"), "down"),
        problem_stat("Collectors down", count_zero("gotthard_collector_up"), "down"),
        problem_stat(
            "Collectors serving stale data", f"sum({sel('gotthard_collector_stale')})", "stale"
        ),
    )
    board.row(
        table(
            "Collectors",
            "none",
            Query(_per_collector("gotthard_collector_up"), name="up", mappings=(UP_DOWN,)),
            Query(_per_collector("gotthard_collector_stale"), name="stale"),
            Query(
                "time() - " + _per_collector("gotthard_collector_last_success_timestamp_seconds"),
                name="since last good poll",
                unit="s",
            ),
            Query(
                _per_collector("gotthard_collector_duration_seconds"),
                name="poll duration",
                unit="s",
            ),
        )
    )
    board.row(
        gauge_timeseries(
            "Poll duration",
            "s",
            "gotthard_collector_duration_seconds",
            "{{instance}} {{collector}}",
        ),
        timeseries(
            "Collector errors",
            "cps",
            Query(
                f"sum by (instance, collector) ({rate('gotthard_collector_errors_total')})",
                "{{instance}} {{collector}}",
            ),
        ),
    )
    board.row(
        gauge_timeseries("Scrape duration", "s", "scrape_duration_seconds", "{{job}} {{instance}}"),
        gauge_timeseries(
            "Samples per scrape", "short", "scrape_samples_scraped", "{{job}} {{instance}}"
        ),
    )
    build = "site, cluster, instance, version, python_version"
    board.row(
        table(
            "Exporter versions",
            "none",
            Query(f"max by ({build}) ({sel('gotthard_build_info')})", name="build"),
            hide=("Time", "Value"),
        )
    )
    return dashboard(NAME, DESCRIPTION, TAGS, board)
