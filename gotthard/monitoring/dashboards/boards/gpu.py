"""The GPU fleet dashboard: NVML metrics of every GPU, per node, job and pod."""

from __future__ import annotations

from typing import Any

from grafanalib.core import Dashboard, TimeSeries

from gotthard.monitoring.components import gpu
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.dashboards.panels import NODE
from gotthard.monitoring.shared import (
    GPU_KEY,
    agg,
    count_zero,
    owner_join,
    rate,
    ratio,
    sel,
)
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = (
    "NVML metrics of every GPU: the fleet of each cluster (utilisation, power, throttling, "
    "ECC, the hottest and fullest nodes, the least utilised jobs), then the chosen nodes' "
    "GPUs (utilisation, GPM activity, memory, power, XIDs, ECC), jobs and pods."
)
#: What the fleet panels say about the Node choice.
_FLEET = (
    " Every GPU of the selected sites and clusters (the Node choice does not apply), "
    "recorded every slow rule interval ({record})."
)
_TOP = (
    " The {n} {what} of each selected cluster at each point (the Node choice does not "
    "apply), recorded every slow rule interval ({record})."
)
TAGS = ("gpu",)
#: The dashboard's own variable, after datasource, site and cluster: one node or several,
#: no "All" (the per-node panels draw every GPU of the chosen nodes at every step; the
#: fleet panels read per-cluster and top-10 records instead, whatever the choice).
VARIABLES = (ui.node_variable("gotthard_gpu_info", include_all=False),)
#: The whole GPU rather than one of its MIG instances.
WHOLE = 'gpu_instance=""'


def _per_job(fn: str, expr: str) -> str:
    """*expr* aggregated per Slurm job, with the job's owner added."""
    return owner_join(agg(fn, "site, cluster, job_id", expr), gpu.JOB_OWNERS)


def _node_mean(*metrics: tuple[str, str]) -> list[ui.Query]:
    """One ``avg`` over the selected whole GPUs per (metric, legend)."""
    return [ui.Query(f"avg({sel(metric, NODE, WHOLE)})", legend) for metric, legend in metrics]


def _job_record(record: str, *, on_nodes: bool = True) -> str:
    """A per-job record of :mod:`~gotthard.monitoring.components.gpu` (each job's figure
    over all its GPUs, without ``instance``) with the job's owner; *on_nodes*: only the
    jobs with a GPU on the selected nodes (a join on ``gotthard_gpu_job_info``, cheap at an
    instant; at every step of a range it would read every GPU's)."""
    expr = sel(record)
    if on_nodes:
        expr += " and on (site, cluster, job_id) " + sel("gotthard_gpu_job_info", NODE)
    return owner_join(expr, gpu.JOB_OWNERS)


def _fleet(title: str, unit: str, *queries: ui.Query, record: str, **kw: Any) -> TimeSeries:
    """A fleet panel over per-cluster records; *record* is named in its description."""
    description = kw.pop("description", "") + _FLEET.format(record=record)
    return ui.timeseries(title, unit, *queries, description=description.strip(), **kw)


def _top(title: str, unit: str, query: ui.Query, what: str, record: str, **kw: Any) -> TimeSeries:
    """A fleet panel over a top-N record of :mod:`~gotthard.monitoring.components.gpu`."""
    note = _TOP.format(n=gpu.TOP_NODES, what=what, record=record)
    description = (kw.pop("description", "") + note).strip()
    return ui.timeseries(title, unit, query, description=description, **kw)


def _fleet_panels(board: ui.Board, t: ThresholdValues) -> None:
    """The fleet of each selected cluster: stats at an instant, time series from records."""
    board.stats(
        ui.stat("GPUs", "short", ui.Query(f"count({sel('gotthard_gpu_info')})", "GPUs")),
        ui.problem_stat(
            "Unhealthy GPUs",
            count_zero("gotthard_gpu_health", WHOLE),
            "unhealthy",
            description="Lost, row-remap failure, or a fatal XID within the health window.",
        ),
        ui.stat(
            "Mean utilisation",
            "percentunit",
            ui.Query(f"avg({sel('gotthard_gpu_utilization_ratio')})", "utilisation"),
        ),
        ui.stat("Power draw", "watt", ui.Query(f"sum({sel('gotthard_gpu_power_watts')})", "power")),
    )
    board.section("Fleet: every GPU of the selected clusters")
    board.row(
        ui.ratio_timeseries(
            "GPU utilisation (cluster)",
            ui.Query(sel(gpu.CLUSTER_UTILIZATION), "{{site}}/{{cluster}}"),
            description="Mean utilisation of every GPU of each cluster "
            f"({gpu.CLUSTER_UTILIZATION}); the Node choice does not apply.",
        ),
        _fleet(
            "Power (cluster)",
            "watt",
            ui.Query(sel(gpu.CLUSTER_POWER), "{{site}}/{{cluster}}"),
            ui.Query(sel(gpu.CLUSTER_POWER_LIMIT), "{{site}}/{{cluster}} limit"),
            record=f"{gpu.CLUSTER_POWER}, {gpu.CLUSTER_POWER_LIMIT}",
            description="Power drawn by every GPU of each cluster, and the sum of their "
            "power limits.",
        ),
        _top(
            "Least utilised GPU jobs: bottom 10",
            "percentunit",
            ui.Query(_job_record(gpu.LEAST_UTILIZED_JOBS, on_nodes=False), "{{job_id}} {{user}}"),
            "GPU jobs with the lowest mean utilisation of their GPUs",
            gpu.LEAST_UTILIZED_JOBS,
            description="The GPUIdleWhileAllocated alert fires for a GPU whose 15-minute "
            "mean stays under the line (it reads each GPU, not these records).",
            minimum=0,
            maximum=1,
            lines=((t[gpu.IDLE_UTILIZATION], "orange"),),
        ),
    )
    board.row(
        _fleet(
            "Throttled time by reason (cluster)",
            "percentunit",
            ui.Query(sel(gpu.CLUSTER_THROTTLING), "{{site}}/{{cluster}} {{reason}}"),
            record=gpu.CLUSTER_THROTTLING,
            description="Share of time the clocks were held back (NVML violation counters), "
            "averaged over each cluster's GPUs. Lines: the thermal (orange) and power (red) "
            "throttling alerts' thresholds, which apply to each GPU.",
            minimum=0,
            lines=(
                (t[gpu.THERMAL_THROTTLE], "orange"),
                (t[gpu.POWER_THROTTLE], "red"),
            ),
        ),
        _fleet(
            "Clock event reasons active (cluster)",
            "short",
            ui.Query(agg("sum", "reason", sel(gpu.CLUSTER_CLOCK_EVENTS)), "{{reason}}"),
            record=gpu.CLUSTER_CLOCK_EVENTS,
            description="GPUs whose clocks are held down by each reason.",
        ),
        _fleet(
            "ECC errors (cluster)",
            "cps",
            ui.Query(agg("sum", "type", sel(gpu.CLUSTER_ECC_ERRORS)), "{{type}}"),
            record=gpu.CLUSTER_ECC_ERRORS,
            description="ECC memory errors per second, corrected and uncorrected; "
            "GPUUncorrectableECCErrors names the GPU.",
        ),
    )
    board.row(
        _top(
            "Hottest nodes: top 10",
            "celsius",
            ui.Query(sel(gpu.HOTTEST_NODES), "{{instance}} {{sensor}}"),
            "nodes with the hottest GPU, per sensor",
            gpu.HOTTEST_NODES,
        ),
        _top(
            "GPU memory used: top 10 nodes",
            "percentunit",
            ui.Query(sel(gpu.FULLEST_NODES), "{{instance}}"),
            "nodes with the largest share of their GPUs' memory in use",
            gpu.FULLEST_NODES,
            minimum=0,
            maximum=1,
        ),
        ui.bargauge(
            "Remapped rows",
            "short",
            ui.Query(agg("sum", "state", sel("gotthard_gpu_remapped_rows")), "{{state}}"),
            description="Correctable and uncorrectable remapped rows; pending and failure "
            "count GPUs.",
            thresholds=ui.BAD_FROM_ONE,
        ),
    )


def _node_panels(board: ui.Board, t: ThresholdValues) -> None:
    """Every GPU of the chosen nodes: what these panels read follows the choice."""
    board.section("Nodes: every GPU of the chosen nodes ($instance)")
    board.row(
        ui.ratio_timeseries(
            "GPU utilisation by node",
            ui.Query(
                agg("avg", "instance", sel("gotthard_gpu_utilization_ratio", NODE)), "{{instance}}"
            ),
        ),
        ui.ratio_timeseries(
            "SM and tensor activity",
            *_node_mean(
                ("gotthard_gpu_sm_active_ratio", "SM active"),
                ("gotthard_gpu_sm_occupancy_ratio", "SM occupancy"),
                ("gotthard_gpu_tensor_active_ratio", "tensor active"),
                ("gotthard_gpu_dram_active_ratio", "DRAM active"),
            ),
            description="GPM metrics (Hopper and newer), averaged over the chosen nodes' GPUs.",
        ),
    )
    power = agg("sum", "instance", sel("gotthard_gpu_power_watts", NODE))
    power_limit = agg("sum", "instance", sel("gotthard_gpu_power_limit_watts", NODE))
    board.row(
        ui.ratio_timeseries(
            "Memory used by node",
            ui.Query(
                ratio(
                    "sum",
                    "instance",
                    sel("gotthard_gpu_memory_used_bytes", NODE, WHOLE),
                    sel("gotthard_gpu_memory_total_bytes", NODE, WHOLE),
                ),
                "{{instance}}",
            ),
        ),
        ui.timeseries(
            "Power by node",
            "watt",
            ui.Query(power, "{{instance}}"),
            ui.Query(power_limit, "{{instance}} limit"),
        ),
        ui.timeseries(
            "Hottest GPU by node",
            "celsius",
            ui.Query(
                agg("max", "instance, sensor", sel("gotthard_gpu_temperature_celsius", NODE)),
                "{{instance}} {{sensor}}",
            ),
        ),
    )
    board.row(
        ui.timeseries(
            "Throttled time by reason",
            "percentunit",
            ui.Query(
                agg("avg", "reason", rate("gotthard_gpu_throttle_seconds_total", NODE)),
                "{{reason}}",
            ),
            description="Share of time the clocks were held back (NVML violation counters), "
            "averaged over the chosen nodes' GPUs. Lines: the thermal (orange) and power "
            "(red) throttling alerts' thresholds, which apply to each GPU.",
            minimum=0,
            lines=((t[gpu.THERMAL_THROTTLE], "orange"), (t[gpu.POWER_THROTTLE], "red")),
        ),
        ui.timeseries(
            "XID errors",
            "short",
            ui.Query(
                agg(
                    "sum",
                    "instance, xid",
                    rate("gotthard_gpu_xid_errors_total", NODE, fn="increase"),
                ),
                "{{instance}} XID {{xid}}",
            ),
            description="A series appears only after a GPU reported an XID.",
        ),
        ui.timeseries(
            "ECC errors",
            "short",
            ui.Query(
                agg(
                    "sum",
                    "instance, type",
                    rate("gotthard_gpu_ecc_errors_total", NODE, fn="increase"),
                ),
                "{{instance}} {{type}}",
            ),
        ),
    )
    board.row(
        ui.timeseries(
            "PCIe replays",
            "cps",
            ui.Query(
                agg("sum", "instance", rate("gotthard_gpu_pcie_replays_total", NODE)),
                "{{instance}}",
            ),
        ),
        ui.ratio_timeseries(
            "GPU utilisation by Kubernetes pod",
            ui.Query(
                agg("avg", "site, cluster, namespace, pod, pod_uid", _PODS),
                "{{namespace}}/{{pod}} {{pod_uid}}",
            ),
        ),
    )
    board.row(
        ui.table(
            "GPU jobs",
            "none",
            ui.Query(
                _per_job("count", sel("gotthard_gpu_job_info", NODE)), name="GPUs", unit="short"
            ),
            ui.Query(_job_record(gpu.JOB_UTILIZATION), name="utilisation", unit="percentunit"),
            ui.Query(_job_record(gpu.JOB_TENSOR_ACTIVE), name="tensor active", unit="percentunit"),
            ui.Query(_job_record(gpu.JOB_MEMORY_USED), name="memory used", unit="bytes"),
            hide=("Time",),
            sort_by="utilisation",
            links=(ui.job_link(),),
            description="Slurm jobs with processes on the GPUs of the chosen nodes "
            "(gotthard_gpu_job_info), with user, account and partition from "
            "gotthard_slurm_job_info (recorded for GPU jobs every few minutes: a job that "
            "just started shows up within them). GPUs counts the job's GPUs (and MIG "
            "instances) on the chosen nodes; utilisation, tensor activity (of each job's "
            "own MIG instances) and memory used are the job's over all its GPUs, from the "
            "per-job recording rules (tensor activity and memory every few minutes). Memory "
            "of a GPU shared by several jobs is counted for each of them. A job id opens the "
            "Job dashboard.",
        )
    )


_PODS = f"{sel('gotthard_gpu_pod_info', NODE)} * on({GPU_KEY}) group_left " + sel(
    "gotthard_gpu_utilization_ratio", NODE
)


def gpu_fleet(t: ThresholdValues) -> Dashboard:
    board = ui.Board()
    _fleet_panels(board, t)
    _node_panels(board, t)
    return ui.dashboard("gpu-fleet", DESCRIPTION, TAGS, board, VARIABLES)
