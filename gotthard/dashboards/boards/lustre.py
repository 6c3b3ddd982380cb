"""The Lustre storage dashboard, and the OST fill queries other dashboards share."""

from __future__ import annotations

from grafanalib.core import Dashboard, TimeSeries

from gotthard.dashboards.boards.slurm import owner_join
from gotthard.dashboards.panels import (
    Board,
    Query,
    agg,
    bargauge,
    dashboard,
    eq,
    label_variable,
    problem_stat,
    rate,
    rx,
    sel,
    stat,
    table,
    timeseries,
)
from gotthard.dashboards.thresholds import (
    LUSTRE_OST_FILL_CRITICAL,
    LUSTRE_OST_FILL_SPREAD,
    LUSTRE_OST_FILL_WARNING,
)

NAME = "Lustre storage"
DESCRIPTION = (
    "Lustre OST fill and imbalance, metadata operations and latency, server health, "
    "recovery, evictions, LNet traffic, per-job IO."
)
TAGS = ("lustre", "storage")

FS = 'fs=~"$fs"'
NOT_HEALTHY = 'state!="healthy"'
#: Colours of an OST's fill, at the thresholds of the Lustre fill alerts.
FILL_THRESHOLDS = ((LUSTRE_OST_FILL_WARNING, "orange"), (LUSTRE_OST_FILL_CRITICAL, "red"))
#: Colour of the fill spread (fullest minus emptiest OST), at the imbalance alert's threshold.
SPREAD_THRESHOLDS = ((LUSTRE_OST_FILL_SPREAD, "orange"),)


def ost_max(metric: str, *, fs: bool = True) -> str:
    """One value per OST: the same OST is reported by its OSS and by every client's osc."""
    matchers = (rx("fs", "$fs"),) if fs else ()
    inner = sel(metric, *matchers, rx("component", "ost|osc"))
    return f"max by (site, cluster, fs, target) ({inner})"


def ost_fill(*, fs: bool = True) -> str:
    """OST fill as ``lfs df`` computes Use%: used / (used + available), used = total - free."""
    available = ost_max("lustre_target_available_bytes", fs=fs)
    capacity = ost_max("lustre_target_capacity_bytes", fs=fs)
    free = ost_max("lustre_target_free_bytes", fs=fs)
    return f"(1 - {available} / ({capacity} - {free} + {available}))"


def fill_spread(fill: str, labels: str) -> str:
    """Fullest minus emptiest OST of each file system (grouped by *labels*)."""
    return f"max by ({labels}) ({fill}) - min by ({labels}) ({fill})"


def _mdt_files(state: str) -> str:
    inner = sel("lustre_target_files", FS, rx("component", "mdt|mdc"), eq("state", state))
    return agg("max", "site, cluster, fs, target", inner)


def _operations(component: str) -> Query:
    expr = agg("sum", "operation", rate("lustre_operations_total", FS, eq("component", component)))
    return Query(expr, "{{operation}}")


def _top_jobs(
    title: str, unit: str, metric: str, *matchers: str, description: str = ""
) -> TimeSeries:
    """The ten jobs with the highest rate of a Lustre job_stats counter."""
    jobs = agg("sum", "site, cluster, fs, job_id", rate(metric, FS, *matchers))
    return timeseries(
        title, unit, Query(f"topk(10, {jobs})", "{{fs}} {{job_id}}"), description=description
    )


def _per_target(title: str, expr: str, *, description: str = "") -> TimeSeries:
    return timeseries(title, "short", Query(expr, "{{target}}"), description=description)


def _lnet(direction: str, legend: str) -> Query:
    metric = f"lustre_lnet_{direction}_total"
    return Query(agg("sum", "site, cluster, instance", rate(metric)), legend)


def _serving(board: Board) -> None:
    """Health of the servers: health_check, recovery, evictions, clients, LNet."""
    recovering = sel("lustre_target_recovery_status", FS, rx("status", "recovering|waiting"))
    board.stats(
        problem_stat(
            "Nodes not healthy",
            agg("sum", "", sel("lustre_health_check", NOT_HEALTHY)),
            "nodes",
            description="Nodes whose health_check reads NOT HEALTHY or LBUG.",
        ),
        problem_stat(
            "Targets in recovery",
            f"sum({recovering})",
            "targets",
            description="OSTs and MDTs whose recovery_status is RECOVERING or WAITING: "
            "IO to them blocks until recovery ends.",
        ),
        problem_stat(
            "Recent evictions",
            f"sum({rate('lustre_target_evictions_total', FS, fn='increase')})",
            "evictions",
            description="Clients evicted by any target over the last rate interval "
            "(eviction_count, Lustre 2.12 and later).",
        ),
        stat(
            "LNet drops",
            "short",
            Query(f"sum({rate('lustre_lnet_drop_count_total')})", "messages/s"),
        ),
    )
    board.row(
        _per_target(
            "Evictions by target",
            agg(
                "sum",
                "site, cluster, fs, target",
                rate("lustre_target_evictions_total", FS, fn="increase"),
            ),
            description="Clients evicted per rate interval (eviction_count, Lustre 2.12+).",
        ),
        _per_target(
            "Connected clients by target",
            agg("max", "site, cluster, fs, target", sel("lustre_target_connected_clients", FS)),
            description="Exports of each server target (num_exports): clients and other servers.",
        ),
        timeseries(
            "Recovery: clients back",
            "percentunit",
            Query(
                agg(
                    "max",
                    "site, cluster, fs, target",
                    sel("lustre_target_recovery_completed_clients", FS),
                )
                + " / "
                + agg(
                    "max",
                    "site, cluster, fs, target",
                    sel("lustre_target_recovery_clients", FS) + " > 0",
                ),
                "{{target}}",
            ),
            minimum=0,
            maximum=1,
            description="Clients that completed recovery over those the target expects "
            "(recovery_status); 100% once recovery is complete.",
        ),
    )
    board.row(
        timeseries(
            "LNet traffic",
            "Bps",
            _lnet("send_bytes", "{{instance}} sent"),
            _lnet("receive_bytes", "{{instance}} received"),
        ),
        timeseries(
            "LNet dropped messages",
            "short",
            _lnet("drop_count", "{{instance}}"),
            description="Messages LNet dropped per second (no route, dead peer, no buffer).",
        ),
    )


def _job_io(metric: str, name: str) -> Query:
    return Query(owner_join(agg("sum", "site, cluster, job_id", rate(metric, FS))), name=name)


def lustre_storage() -> Dashboard:
    fill = ost_fill()
    board = Board()
    board.stats(
        stat(
            "OST capacity",
            "bytes",
            Query(f"sum({ost_max('lustre_target_capacity_bytes')})", "capacity"),
        ),
        stat(
            "Fullest OST", "percentunit", Query(f"max({fill})", "fill"), thresholds=FILL_THRESHOLDS
        ),
        stat(
            "OST fill spread",
            "percentunit",
            Query(f"max({fill_spread(fill, 'fs')})", "max - min"),
            thresholds=SPREAD_THRESHOLDS,
            description="Fullest minus emptiest OST of a file system: imbalance.",
        ),
        stat(
            "Metadata operations",
            "ops",
            Query(f"sum({rate('lustre_operations_total', FS, eq('component', 'mdt'))})", "ops"),
        ),
    )
    board.row(
        bargauge(
            "OST fill",
            "percentunit",
            Query(fill, "{{target}}"),
            maximum=1,
            thresholds=FILL_THRESHOLDS,
        ),
        timeseries(
            "OST fill spread by file system",
            "percentunit",
            Query(fill_spread(fill, "site, cluster, fs"), "{{fs}}"),
            minimum=0,
        ),
        h=10,
    )
    board.row(
        timeseries(
            "MDT inodes used",
            "percentunit",
            Query(f"1 - {_mdt_files('free')} / {_mdt_files('total')}", "{{target}}"),
            minimum=0,
            maximum=1,
        ),
        timeseries("Metadata operations by type", "ops", _operations("mdt")),
    )
    mdt = 'component="mdt"'
    board.row(
        timeseries(
            "Metadata operation latency (mean)",
            "s",
            Query(
                agg("sum", "operation", rate("lustre_operation_latency_seconds_total", FS, mdt))
                + " / "
                + agg("sum", "operation", rate("lustre_operations_total", FS, mdt)),
                "{{operation}}",
            ),
        ),
        timeseries("OST operations by type", "ops", _operations("ost")),
    )
    _serving(board)
    board.row(
        _top_jobs(
            "Top jobs by read",
            "Bps",
            "lustre_job_read_bytes_total",
            description="Needs --lustre.job-stats on the servers.",
        ),
        _top_jobs("Top jobs by write", "Bps", "lustre_job_write_bytes_total"),
        _top_jobs(
            "Top jobs by metadata operations",
            "ops",
            "lustre_job_operations_total",
            'target=~".*-MDT[0-9a-fA-F]+"',
        ),
    )
    board.add(
        table(
            "Job IO by Slurm user",
            "Bps",
            _job_io("lustre_job_read_bytes_total", "read"),
            _job_io("lustre_job_write_bytes_total", "write"),
            sort_by="write",
            description="Lustre job_stats (job_id from jobid_var=SLURM_JOB_ID) joined to "
            "slurm_job_info on cluster and job_id.",
        ),
        w=16,
    )
    board.add(
        problem_stat(
            "Jobs left out of job stats",
            f"sum({sel('lustre_job_stats_truncated')})",
            "jobs dropped",
            description="Jobs dropped from the per-job series by --lustre.job-stats-limit "
            "(lowest IO first).",
        ),
        w=8,
    )
    return dashboard(
        NAME,
        DESCRIPTION,
        TAGS,
        board,
        [label_variable("fs", "File system", "lustre_target_capacity_bytes")],
    )
