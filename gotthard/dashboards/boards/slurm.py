"""The Slurm cluster dashboard, and the Slurm queries other dashboards share."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.dashboards.panels import (
    PASS_FAIL,
    UP_DOWN,
    Board,
    Query,
    bargauge,
    dashboard,
    eq,
    gauge_timeseries,
    label_variable,
    problem_stat,
    rate,
    ratio,
    sel,
    stat,
    table,
    timeseries,
    zero_if_none,
)

NAME = "Slurm cluster"
DESCRIPTION = "Jobs, partitions, nodes and the controller of each Slurm cluster."
TAGS = ("slurm",)
PARTITION = 'partition=~"$partition"'


def owner_join(expr: str) -> str:
    """Add ``user``, ``account`` and ``partition`` of the Slurm job to a ``job_id`` result.

    ``slurm_job_info`` comes from the controller's exporter (another ``instance``), so the
    match is on ``cluster`` and ``job_id`` only; ``max by`` first collapses duplicates
    from redundant exporters so that the right-hand side is unique per job.
    """
    owners = "max by (cluster, job_id, user, account, partition) (" + sel("slurm_job_info") + ")"
    return f"({expr}) * on(cluster, job_id) group_left(user, account, partition) {owners}"


def allocated(metric: str, labels: str, *matchers: str) -> str:
    """Allocated over total of a ``state``-labelled Slurm gauge, summed by *labels*."""
    return ratio(
        "sum",
        labels,
        sel(metric, eq("state", "alloc"), *matchers),
        sel(metric, eq("state", "total"), *matchers),
    )


def unavailable_nodes() -> str:
    """Nodes whose state (base+flags) says down, draining/drained or failing; 0 if none."""
    nodes = sel("slurm_node_info")
    return zero_if_none(sel("slurm_node_info", 'state=~".*(down|drain|fail).*"'), "", nodes)


def _jobs(state: str) -> str:
    return f"sum({sel('slurm_jobs', eq('state', state), PARTITION)})"


def _maxima(*metrics: tuple[str, str]) -> list[Query]:
    """One ``max(metric)`` query per (metric, legend): controller-wide scheduler gauges."""
    return [Query(f"max({sel(metric)})", legend) for metric, legend in metrics]


def _allocation(metric: str) -> Query:
    """Allocated share of a resource per partition."""
    return Query(allocated(metric, "cluster, partition", PARTITION), "{{cluster}} {{partition}}")


def slurm_cluster() -> Dashboard:
    board = Board()
    board.stats(
        stat("Controller", "none", Query(sel("slurm_up"), "{{cluster}}"), mappings=(UP_DOWN,)),
        stat(
            "Probes",
            "none",
            Query(sel("slurm_probe_success"), "{{cluster}} {{op}}"),
            mappings=(PASS_FAIL,),
            description="scontrol ping and sbatch --test-only from the exporter.",
        ),
        stat("Running jobs", "short", Query(_jobs("running"), "running")),
        stat("Pending jobs", "short", Query(_jobs("pending"), "pending")),
        problem_stat("Nodes down or draining", unavailable_nodes(), "nodes"),
        stat(
            "Main scheduler cycle",
            "s",
            *_maxima(("slurm_scheduler_cycle_last_seconds", "last cycle")),
            thresholds=((1.0, "orange"), (5.0, "red")),
        ),
    )
    board.row(
        timeseries(
            "Jobs by state",
            "short",
            Query(f"sum by (state) ({sel('slurm_jobs', PARTITION)})", "{{state}}"),
            stack=True,
        ),
        timeseries(
            "Pending jobs by reason",
            "short",
            Query(f"sum by (reason) ({sel('slurm_jobs_pending', PARTITION)})", "{{reason}}"),
            stack=True,
        ),
    )
    board.row(
        timeseries(
            "CPU allocation by partition",
            "percentunit",
            _allocation("slurm_partition_cpus"),
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "GPU allocation by partition",
            "percentunit",
            _allocation("slurm_partition_gpus"),
            minimum=0,
            maximum=1,
        ),
        bargauge(
            "Memory allocated by partition",
            "percentunit",
            _allocation("slurm_partition_memory_bytes"),
            maximum=1,
            thresholds=((0.8, "orange"), (0.95, "red")),
        ),
    )
    board.row(
        timeseries(
            "Nodes by state and partition",
            "short",
            Query(
                f"sum by (partition, state) ({sel('slurm_nodes', PARTITION)})",
                "{{partition}} {{state}}",
            ),
            description="A node in several partitions is counted in each of them.",
            stack=True,
        ),
        table(
            "Nodes and reasons",
            "none",
            Query(
                f"max by (cluster, node, state, reason) ({sel('slurm_node_info')})",
                name="nodes",
            ),
            hide=("Time", "Value"),
            description="Every node with its state (base+flags) and the reason Slurm holds.",
        ),
    )
    board.row(
        timeseries(
            "Scheduler cycle time",
            "s",
            *_maxima(
                ("slurm_scheduler_cycle_last_seconds", "main last"),
                ("slurm_scheduler_cycle_mean_seconds", "main mean"),
                ("slurm_scheduler_cycle_max_seconds", "main max"),
                ("slurm_scheduler_backfill_cycle_last_seconds", "backfill last"),
                ("slurm_scheduler_backfill_cycle_mean_seconds", "backfill mean"),
            ),
        ),
        timeseries(
            "Scheduler queues",
            "short",
            *_maxima(
                ("slurm_scheduler_queue_length", "main queue"),
                ("slurm_scheduler_backfill_queue_length", "backfill queue"),
                ("slurm_scheduler_agent_queue_size", "agent queue"),
                ("slurm_scheduler_dbd_agent_queue_size", "dbd agent queue"),
                ("slurm_scheduler_threads", "server threads"),
            ),
        ),
        timeseries(
            "Backfilled jobs",
            "ops",
            Query(f"sum({rate('slurm_scheduler_backfilled_jobs_total')})", "backfilled"),
        ),
    )
    board.row(
        timeseries(
            "Job events",
            "ops",
            Query(
                f"sum by (event) ({rate('slurm_scheduler_jobs_total')})",
                "{{event}}",
            ),
            description="Jobs submitted, started, completed, canceled and failed per second, "
            "from slurmctld's own counters.",
        ),
        table(
            "Reservations",
            "none",
            Query(
                f"max by (cluster, reservation) ({sel('slurm_reservation_nodes')})"
                " * on(cluster, reservation) group_left(state, partition, flags) "
                "max by (cluster, reservation, state, partition, flags) "
                f"({sel('slurm_reservation_info')})",
                name="nodes",
            ),
            description="Advance reservations (maintenance windows, reserved nodes): state, "
            "partition, flags and, as the value, their node count.",
        ),
    )
    calls = f"sum by (type) ({rate('slurm_rpc_calls_total')})"
    board.row(
        timeseries("RPCs by type", "reqps", Query(calls, "{{type}}")),
        timeseries(
            "RPC mean latency by type",
            "s",
            Query(
                f"sum by (type) ({rate('slurm_rpc_duration_seconds_total')}) / {calls}",
                "{{type}}",
            ),
        ),
    )
    board.row(
        gauge_timeseries(
            "Probe duration", "s", "slurm_probe_duration_seconds", "{{cluster}} {{op}}"
        )
    )
    return dashboard(
        NAME,
        DESCRIPTION,
        TAGS,
        board,
        [label_variable("partition", "Partition", "slurm_partition_info")],
    )
