"""The GPU fleet dashboard: NVML metrics of every GPU, per node, job and pod."""

from __future__ import annotations

from grafanalib.core import Dashboard

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
    "NVML metrics of every GPU: utilisation, GPM activity, memory, power, throttling, "
    "XIDs, ECC and row remapping, with per-job and per-pod views."
)
TAGS = ("gpu",)
#: The dashboard's own variable, after datasource, site and cluster.
VARIABLES = (ui.node_variable("gotthard_gpu_info"),)
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


def gpu_fleet(t: ThresholdValues) -> Dashboard:
    throttling = (
        (t[gpu.THERMAL_THROTTLE], "orange"),
        (t[gpu.POWER_THROTTLE], "red"),
    )
    board = ui.Board()
    board.stats(
        ui.stat("GPUs", "short", ui.Query(f"count({sel('gotthard_gpu_info', NODE)})", "GPUs")),
        ui.problem_stat(
            "Unhealthy GPUs",
            count_zero("gotthard_gpu_health", NODE, WHOLE),
            "unhealthy",
            description="Lost, row-remap failure, or a fatal XID within the health window.",
        ),
        ui.stat(
            "Mean utilisation",
            "percentunit",
            ui.Query(f"avg({sel('gotthard_gpu_utilization_ratio', NODE)})", "utilisation"),
        ),
        ui.stat(
            "Power draw", "watt", ui.Query(f"sum({sel('gotthard_gpu_power_watts', NODE)})", "power")
        ),
    )
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
            description="GPM metrics (Hopper and newer), averaged over the selected GPUs.",
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
            "averaged over the selected GPUs. Lines: the thermal (orange) and power (red) "
            "throttling alerts' thresholds, which apply to each GPU.",
            minimum=0,
            lines=throttling,
        ),
        ui.timeseries(
            "Clock event reasons active",
            "short",
            ui.Query(
                agg("sum", "reason", sel("gotthard_gpu_clocks_event_reasons", NODE)), "{{reason}}"
            ),
            description="GPUs whose clocks are held down by each reason right now.",
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
    )
    board.row(
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
        ui.bargauge(
            "Remapped rows",
            "short",
            ui.Query(agg("sum", "state", sel("gotthard_gpu_remapped_rows", NODE)), "{{state}}"),
            description="Correctable and uncorrectable remapped rows; pending and failure "
            "count GPUs.",
            thresholds=ui.BAD_FROM_ONE,
        ),
        ui.timeseries(
            "PCIe replays",
            "cps",
            ui.Query(
                agg("sum", "instance", rate("gotthard_gpu_pcie_replays_total", NODE)),
                "{{instance}}",
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
            description="Slurm jobs with processes on the GPUs of the selected nodes "
            "(gotthard_gpu_job_info), with user, account and partition from "
            "gotthard_slurm_job_info (recorded for GPU jobs every few minutes: a job that "
            "just started shows up within them). GPUs counts the job's GPUs (and MIG "
            "instances) on the selected nodes; utilisation, tensor activity (of each job's "
            "own MIG instances) and memory used are the job's over all its GPUs, from the "
            "per-job recording rules (tensor activity and memory every few minutes). Memory "
            "of a GPU shared by several jobs is counted for each of them. A job id opens the "
            "Job dashboard.",
        )
    )
    pods = f"{sel('gotthard_gpu_pod_info', NODE)} * on({GPU_KEY}) group_left " + sel(
        "gotthard_gpu_utilization_ratio", NODE
    )
    board.row(
        ui.ratio_timeseries(
            "GPU utilisation by job",
            ui.Query(_job_record(gpu.JOB_UTILIZATION, on_nodes=False), "{{job_id}} {{user}}"),
            description="The mean utilisation of each job's GPUs (recorded per job), for "
            "every GPU job of the selected sites and clusters: the node filter does not "
            "apply here (it would read every GPU's job at every step). The "
            "GPUIdleWhileAllocated alert fires for a GPU whose 15-minute mean stays under "
            "the line.",
            lines=((t[gpu.IDLE_UTILIZATION], "orange"),),
        ),
        ui.ratio_timeseries(
            "GPU utilisation by Kubernetes pod",
            ui.Query(
                agg("avg", "site, cluster, namespace, pod, pod_uid", pods),
                "{{namespace}}/{{pod}} {{pod_uid}}",
            ),
        ),
    )
    return ui.dashboard("gpu-fleet", DESCRIPTION, TAGS, board, VARIABLES)
