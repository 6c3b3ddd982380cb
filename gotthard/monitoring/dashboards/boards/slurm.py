"""The Slurm cluster dashboard, and the Slurm queries other dashboards share."""

from __future__ import annotations

from grafanalib.core import Dashboard, TimeSeries

from gotthard import slurm_state
from gotthard.monitoring.components import slurm
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.shared import SLURM_JOB_INFO, eq, rate, ratio, sel, zero_if_none
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = "Jobs, partitions, nodes and the controller of each Slurm cluster."
TAGS = ("slurm",)
#: The dashboard's own variable, after datasource, site and cluster.
VARIABLES = (ui.label_variable("partition", "Partition", "gotthard_slurm_partition_info"),)
PARTITION = 'partition=~"$partition"'


def allocated(metric: str, labels: str, *matchers: str) -> str:
    """Allocated over total of a ``state``-labelled Slurm gauge, summed by *labels*."""
    return ratio(
        "sum",
        labels,
        sel(metric, eq("state", "alloc"), *matchers),
        sel(metric, eq("state", "total"), *matchers),
    )


def unavailable_nodes() -> str:
    """Nodes whose state (base+flags) says the scheduler starts no job on them (down,
    drained, failing, in maintenance, not responding, ...: slurm_state's definition);
    0 if none."""
    nodes = sel("gotthard_slurm_node_info")
    unavailable = f'state=~"{slurm_state.UNAVAILABLE_FULL_STATE_PATTERN}"'
    return zero_if_none(sel("gotthard_slurm_node_info", unavailable), "", nodes)


def _jobs(state: str) -> str:
    return f"sum({sel('gotthard_slurm_jobs', eq('state', state), PARTITION)})"


def _maxima(*metrics: tuple[str, str]) -> list[ui.Query]:
    """One ``max(metric)`` query per (metric, legend): controller-wide scheduler gauges."""
    return [ui.Query(f"max({sel(metric)})", legend) for metric, legend in metrics]


def _allocation(metric: str) -> ui.Query:
    """Allocated share of a resource per partition."""
    return ui.Query(allocated(metric, "cluster, partition", PARTITION), "{{cluster}} {{partition}}")


def _allocation_timeseries(title: str, record: str) -> TimeSeries:
    """Allocated share per partition over time, from the recording rule."""
    return ui.ratio_timeseries(title, ui.Query(sel(record, PARTITION), "{{cluster}} {{partition}}"))


def slurm_cluster(t: ThresholdValues) -> Dashboard:
    cycle = ((t[slurm.SCHEDULER_CYCLE], "red"),)
    board = ui.Board()
    board.stats(
        ui.stat(
            "Controller",
            "none",
            ui.Query(sel("gotthard_slurm_up"), "{{cluster}}"),
            mappings=(ui.UP_DOWN,),
        ),
        ui.stat(
            "Probes",
            "none",
            ui.Query(sel("gotthard_slurm_probe_success"), "{{cluster}} {{op}}"),
            mappings=(ui.PASS_FAIL,),
            description="scontrol ping and sbatch --test-only from the exporter.",
        ),
        ui.stat("Running jobs", "short", ui.Query(_jobs("running"), "running")),
        ui.stat("Pending jobs", "short", ui.Query(_jobs("pending"), "pending")),
        ui.problem_stat("Nodes unavailable", unavailable_nodes(), "nodes"),
        ui.stat(
            "Nodes drained for maintenance",
            "short",
            ui.Query(f"sum({sel(slurm.MAINTENANCE_DRAINS)})", "drained"),
            description="Drained with a reason Gotthard did not write (an operator's or "
            "Slurm's): maintenance, not paged by SlurmNodesUnavailable.",
        ),
        ui.stat(
            "Main scheduler cycle",
            "s",
            *_maxima(("gotthard_slurm_scheduler_cycle_last_seconds", "last cycle")),
            thresholds=cycle,
        ),
    )
    board.row(
        ui.timeseries(
            "Jobs by state",
            "short",
            ui.Query(f"sum by (state) ({sel('gotthard_slurm_jobs', PARTITION)})", "{{state}}"),
            stack=True,
        ),
        ui.timeseries(
            "Pending jobs by reason",
            "short",
            ui.Query(
                f"sum by (reason) ({sel('gotthard_slurm_jobs_pending', PARTITION)})", "{{reason}}"
            ),
            stack=True,
        ),
    )
    board.row(
        _allocation_timeseries("CPU allocation by partition", slurm.PARTITION_CPUS_ALLOC),
        _allocation_timeseries("GPU allocation by partition", slurm.PARTITION_GPUS_ALLOC),
        ui.bargauge(
            "Memory allocated by partition",
            "percentunit",
            _allocation("gotthard_slurm_partition_memory_bytes"),
            maximum=1,
            thresholds=((0.8, "orange"), (0.95, "red")),
        ),
    )
    board.row(
        ui.timeseries(
            "Nodes by state and partition",
            "short",
            ui.Query(
                f"sum by (partition, state) ({sel(slurm.NODES_BY_STATE, PARTITION)})",
                "{{partition}} {{state}}",
            ),
            description="A node in several partitions is counted in each of them.",
            stack=True,
        ),
        ui.table(
            "Nodes and reasons",
            "none",
            ui.Query(
                f"max by (cluster, node, state, reason) ({sel('gotthard_slurm_node_info')})",
                name="nodes",
            ),
            hide=("Time", "Value"),
            description="Every node with its state (base+flags) and the reason Slurm holds.",
        ),
    )
    board.row(
        ui.timeseries(
            "Scheduler cycle time",
            "s",
            *_maxima(
                ("gotthard_slurm_scheduler_cycle_last_seconds", "main last"),
                ("gotthard_slurm_scheduler_cycle_mean_seconds", "main mean"),
                ("gotthard_slurm_scheduler_cycle_max_seconds", "main max"),
                ("gotthard_slurm_scheduler_backfill_cycle_last_seconds", "backfill last"),
                ("gotthard_slurm_scheduler_backfill_cycle_mean_seconds", "backfill mean"),
            ),
            lines=cycle,
            description="The SlurmSchedulerCycleSlow alert compares the main cycle's "
            "10-minute mean with the red line.",
        ),
        ui.timeseries(
            "Scheduler queues",
            "short",
            *_maxima(
                ("gotthard_slurm_scheduler_queue_length", "main queue"),
                ("gotthard_slurm_scheduler_backfill_queue_length", "backfill queue"),
                ("gotthard_slurm_scheduler_agent_queue_size", "agent queue"),
                ("gotthard_slurm_scheduler_dbd_agent_queue_size", "dbd agent queue"),
                ("gotthard_slurm_scheduler_threads", "server threads"),
            ),
        ),
        ui.timeseries(
            "Backfilled jobs",
            "ops",
            ui.Query(
                f"sum({rate('gotthard_slurm_scheduler_backfilled_jobs_total')})", "backfilled"
            ),
        ),
    )
    board.row(
        ui.timeseries(
            "Job events",
            "ops",
            ui.Query(
                f"sum by (event) ({rate('gotthard_slurm_scheduler_jobs_total')})",
                "{{event}}",
            ),
            description="Jobs submitted, started, completed, canceled and failed per second, "
            "from slurmctld's own counters.",
        ),
        ui.table(
            "Reservations",
            "none",
            ui.Query(
                f"max by (cluster, reservation) ({sel('gotthard_slurm_reservation_nodes')})"
                " * on(cluster, reservation) group_left(state, partition, flags) "
                "max by (cluster, reservation, state, partition, flags) "
                f"({sel('gotthard_slurm_reservation_info')})",
                name="nodes",
            ),
            description="Advance reservations (maintenance windows, reserved nodes): state, "
            "partition, flags and, as the value, their node count.",
        ),
    )
    calls = f"sum by (type) ({rate('gotthard_slurm_rpc_calls_total')})"
    board.row(
        ui.timeseries("RPCs by type", "reqps", ui.Query(calls, "{{type}}")),
        ui.timeseries(
            "RPC mean latency by type",
            "s",
            ui.Query(
                f"sum by (type) ({rate('gotthard_slurm_rpc_duration_seconds_total')}) / {calls}",
                "{{type}}",
            ),
        ),
    )
    board.row(
        ui.gauge_timeseries(
            "Probe duration", "s", "gotthard_slurm_probe_duration_seconds", "{{cluster}} {{op}}"
        ),
        ui.table(
            "Running jobs",
            "none",
            ui.Query(
                f"max by (site, cluster, job_id, user, account, partition) ({sel(SLURM_JOB_INFO)})",
                name="running",
            ),
            hide=("Time", "Value"),
            links=(ui.job_link(),),
            description="One row per running job (gotthard_slurm_job_info); a job id opens the Job "
            "dashboard: its GPUs, Lustre I/O and Slingshot traffic.",
        ),
    )
    accounts = eq("user", "")
    board.row(
        ui.bargauge(
            "Fair-share factor by account and user",
            "none",
            ui.Query(
                f"max by (cluster, account, user) ({sel('gotthard_slurm_account_fairshare')})",
                "{{cluster}} {{account}} {{user}}",
            ),
            maximum=1,
            description="slurmctld's fair-share factor of each user association (0..1; "
            "lower: it used more than its share and waits longer). Needs slurmdbd and the "
            "exporter's --slurm.fairshare.",
        ),
        ui.timeseries(
            "Raw usage by account",
            "s",
            ui.Query(
                "max by (cluster, account) "
                f"({sel('gotthard_slurm_account_raw_usage_seconds', accounts)})",
                "{{cluster}} {{account}}",
            ),
            description="Decayed usage charged to each account (billing TRES-seconds: "
            "CPU-seconds unless TRESBillingWeights), as sshare's RawUsage.",
        ),
        ui.timeseries(
            "Effective usage by account",
            "percentunit",
            ui.Query(
                "max by (cluster, account) "
                f"({sel('gotthard_slurm_account_effective_usage_ratio', accounts)})",
                "{{cluster}} {{account}}",
            ),
            description="Each account's share of its parent's usage (sshare EffectvUsage).",
        ),
    )
    return ui.dashboard("slurm-cluster", DESCRIPTION, TAGS, board, VARIABLES)
