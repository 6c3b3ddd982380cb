"""The Lustre storage dashboard, and the OST fill queries other dashboards share."""

from __future__ import annotations

from grafanalib.core import Dashboard, TimeSeries

from gotthard.monitoring.components import lustre
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.shared import agg, eq, owner_join, rate, rx, sel
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = (
    "Lustre OST fill and imbalance, metadata operations and latency, server health, "
    "recovery, evictions, LNet traffic, per-job IO."
)
TAGS = ("lustre", "storage")
#: The dashboard's own variable, after datasource, site and cluster.
VARIABLES = (ui.label_variable("fs", "File system", "gotthard_lustre_target_capacity_bytes"),)

FS = 'fs=~"$fs"'
NOT_HEALTHY = 'state!="healthy"'


def fill_thresholds(t: ThresholdValues) -> tuple[tuple[float, str], ...]:
    """Colours of an OST's fill, at the thresholds of the Lustre fill alerts."""
    return ((t[lustre.OST_FILL_WARNING], "orange"), (t[lustre.OST_FILL_CRITICAL], "red"))


def spread_thresholds(t: ThresholdValues) -> tuple[tuple[float, str], ...]:
    """Colour of the fill spread (fullest minus emptiest OST), at the imbalance alert's."""
    return ((t[lustre.OST_FILL_SPREAD], "orange"),)


def _mdt_files(state: str) -> str:
    inner = sel("gotthard_lustre_target_files", FS, rx("component", "mdt|mdc"), eq("state", state))
    return agg("max", "site, cluster, fs, target", inner)


def _operations(component: str) -> ui.Query:
    expr = agg(
        "sum", "operation", rate("gotthard_lustre_operations_total", FS, eq("component", component))
    )
    return ui.Query(expr, "{{operation}}")


def _top_jobs(title: str, unit: str, record: str, description: str = "") -> TimeSeries:
    """The jobs with the highest rate of a Lustre job_stats counter, from its record of
    each file system's busiest jobs (``lustre.JOB_READ_TOP`` and its siblings)."""
    query = ui.Query(f"topk({lustre.TOP_JOBS}, {sel(record, FS)})", "{{fs}} {{job_id}}")
    return ui.timeseries(title, unit, query, description=description)


def _per_target(
    title: str,
    expr: str,
    *,
    unit: str = "short",
    description: str = "",
    lines: tuple[tuple[float, str], ...] = (),
) -> TimeSeries:
    """One series per Lustre target."""
    query = ui.Query(expr, "{{target}}")
    return ui.timeseries(title, unit, query, description=description, lines=lines)


def _serving(board: ui.Board, t: ThresholdValues) -> None:
    """Health of the servers: health_check, recovery, evictions, clients, LNet."""
    recovering = sel(
        "gotthard_lustre_target_recovery_status", FS, rx("status", "recovering|waiting")
    )
    board.stats(
        ui.problem_stat(
            "Nodes not healthy",
            agg("sum", "", sel("gotthard_lustre_health_state", NOT_HEALTHY)),
            "nodes",
            description="Nodes whose health_check reads NOT HEALTHY or LBUG.",
        ),
        ui.problem_stat(
            "Targets in recovery",
            f"sum({recovering})",
            "targets",
            description="OSTs and MDTs whose recovery_status is RECOVERING or WAITING: "
            "IO to them blocks until recovery ends.",
        ),
        ui.problem_stat(
            "Recent evictions",
            f"sum({sel(lustre.EVICTIONS, FS)})",
            "evictions",
            description="Clients evicted by any target in the last 10 minutes "
            "(eviction_count, Lustre 2.12 and later).",
        ),
        ui.stat("LNet drops", "short", ui.Query(f"sum({sel(lustre.LNET_DROPS)})", "messages/s")),
    )
    board.row(
        _per_target(
            "Evictions by target",
            sel(lustre.EVICTIONS, FS),
            description="Clients evicted in the last 10 minutes (eviction_count, Lustre "
            "2.12+). LustreEvictionStorm fires above the line.",
            lines=((t[lustre.EVICTIONS_10M], "red"),),
        ),
        _per_target(
            "Connected clients by target",
            agg(
                "max",
                "site, cluster, fs, target",
                sel("gotthard_lustre_target_connected_clients", FS),
            ),
            description="Exports of each server target (num_exports): clients and other servers.",
        ),
        ui.timeseries(
            "Recovery: clients back",
            "percentunit",
            ui.Query(
                agg(
                    "max",
                    "site, cluster, fs, target",
                    sel("gotthard_lustre_target_recovery_completed_clients", FS),
                )
                + " / "
                + agg(
                    "max",
                    "site, cluster, fs, target",
                    sel("gotthard_lustre_target_recovery_clients", FS) + " > 0",
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
        ui.timeseries(
            "LNet traffic",
            "Bps",
            ui.Query(sel(lustre.LNET_SERVER_BYTES), "{{instance}} {{direction}}"),
            ui.Query(sel(lustre.LNET_BYTES), "{{cluster}}, every node: {{direction}}"),
            description="LNet bytes per second each Lustre server (oss, mds, mgs) sends and "
            "receives, and what every node of the cluster, clients included, sends and "
            "receives together.",
        ),
        ui.timeseries(
            "LNet dropped messages",
            "short",
            ui.Query(sel(lustre.LNET_DROPS_TOP), "{{instance}}"),
            description="Messages LNet dropped per second (no route, dead peer, no buffer) by "
            f"the {lustre.TOP_DROPPING} nodes of each cluster that drop the most (nodes that "
            "drop none are left out). LustreLNetDrops fires above the line.",
            lines=((t[lustre.LNET_DROPS_PER_SECOND], "red"),),
        ),
    )


def _job_io(record: str, name: str) -> ui.Query:
    return ui.Query(owner_join(agg("sum", "site, cluster, job_id", sel(record, FS))), name=name)


def lustre_storage(t: ThresholdValues) -> Dashboard:
    fill = sel(lustre.OST_FILL, FS)
    fill_colours = fill_thresholds(t)
    board = ui.Board()
    board.stats(
        ui.stat(
            "OST capacity",
            "bytes",
            ui.Query(f"sum({sel(lustre.CAPACITY, FS)})", "capacity"),
        ),
        ui.stat(
            "Fullest OST", "percentunit", ui.Query(f"max({fill})", "fill"), thresholds=fill_colours
        ),
        ui.stat(
            "OST fill spread",
            "percentunit",
            ui.Query(f"max({sel(lustre.FILL_SPREAD, FS)})", "max - min"),
            thresholds=spread_thresholds(t),
            description="Fullest minus emptiest OST of a file system: imbalance.",
        ),
        ui.stat(
            "Metadata operations",
            "ops",
            ui.Query(f"sum({sel(lustre.FS_MDT_OPERATIONS, FS)})", "ops"),
        ),
    )
    board.row(
        ui.bargauge(
            "OST fill",
            "percentunit",
            ui.Query(fill, "{{target}}"),
            maximum=1,
            thresholds=fill_colours,
            description="Used fraction of each OST (1 - available/capacity), as the "
            "LustreOSTFillHigh (orange) and LustreOSTFillCritical (red) alerts see it.",
        ),
        ui.timeseries(
            "OST fill spread by file system",
            "percentunit",
            ui.Query(sel(lustre.FILL_SPREAD, FS), "{{fs}}"),
            minimum=0,
            lines=spread_thresholds(t),
        ),
        h=10,
    )
    board.row(
        ui.timeseries(
            "MDT inodes used",
            "percentunit",
            ui.Query(f"1 - {_mdt_files('free')} / {_mdt_files('total')}", "{{target}}"),
            minimum=0,
            maximum=1,
        ),
        ui.timeseries(
            "Metadata operations by type",
            "ops",
            ui.Query(agg("sum", "operation", sel(lustre.MDT_OPERATIONS, FS)), "{{operation}}"),
        ),
    )
    board.row(
        _per_target(
            "Metadata operation latency (mean)",
            sel(lustre.MDT_LATENCY, FS),
            unit="s",
            description="Mean latency of the timed operations of each MDT. "
            "LustreMetadataLatencyHigh fires above the line.",
            lines=((t[lustre.MDT_LATENCY_SECONDS], "red"),),
        ),
        ui.timeseries("OST operations by type", "ops", _operations("ost")),
    )
    _serving(board, t)
    board.row(
        _top_jobs(
            "Top jobs by read",
            "Bps",
            lustre.JOB_READ_TOP,
            description="Needs --lustre.job-stats on the servers.",
        ),
        _top_jobs("Top jobs by write", "Bps", lustre.JOB_WRITE_TOP),
        _top_jobs("Top jobs by metadata operations", "ops", lustre.JOB_MDT_OPERATIONS_TOP),
    )
    board.add(
        ui.table(
            "Job IO by Slurm user",
            "Bps",
            _job_io(lustre.JOB_READ, "read"),
            _job_io(lustre.JOB_WRITE, "write"),
            sort_by="write",
            description="Lustre job_stats (job_id from jobid_var=SLURM_JOB_ID) joined to "
            "gotthard_slurm_job_info on cluster and job_id.",
        ),
        w=16,
    )
    board.add(
        ui.problem_stat(
            "Jobs left out of job stats",
            f"sum({sel('gotthard_lustre_job_stats_truncated')})",
            "jobs dropped",
            description="Jobs dropped from the per-job series by --lustre.job-stats-limit "
            "(lowest IO first).",
        ),
        w=8,
    )
    return ui.dashboard("lustre-storage", DESCRIPTION, TAGS, board, VARIABLES)
