"""The GPU fleet dashboard: NVML metrics of every GPU, per node, job and pod."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.dashboards.boards.slurm import owner_join
from gotthard.dashboards.panels import (
    BAD_FROM_ONE,
    Board,
    Query,
    agg,
    bargauge,
    count_zero,
    dashboard,
    label_variable,
    problem_stat,
    rate,
    ratio,
    ratio_timeseries,
    sel,
    stat,
    table,
    timeseries,
)

NAME = "GPU fleet"
DESCRIPTION = (
    "NVML metrics of every GPU: utilisation, GPM activity, memory, power, throttling, "
    "XIDs, ECC and row remapping, with per-job and per-pod views."
)
TAGS = ("gpu",)
#: Labels that identify one whole GPU across the fleet (``instance`` is the node's
#: exporter, ``gpu`` the NVML index, ``uuid`` the board).
GPU_KEY = "site, cluster, instance, gpu, uuid"
NODE = 'instance=~"$instance"'
#: The whole GPU rather than one of its MIG instances.
WHOLE = 'gpu_instance=""'


def per_gpu_job(metric: str, *, mig: bool = False, instance: bool = True) -> str:
    """``gpu_job_info * on(<gpu key>) group_left <metric>``: one series per (GPU, job).

    ``gpu_job_info`` is the "many" side: a GPU shared by two jobs (or two MIG
    instances) has two info series but one ``gpu_utilization_ratio``. The reverse,
    ``metric * on(...) group_left(job_id) gpu_job_info``, fails with "many-to-many
    matching" as soon as a GPU holds two jobs. MIG-aware metrics also match on
    ``gpu_instance`` (empty, i.e. absent, for a whole GPU).
    """
    key = GPU_KEY + (", gpu_instance" if mig else "")
    node = (NODE,) if instance else ()
    return f"{sel('gpu_job_info', *node)} * on({key}) group_left {sel(metric, *node)}"


def _per_job(fn: str, expr: str) -> str:
    """*expr* aggregated per Slurm job, with the job's owner added."""
    return owner_join(agg(fn, "site, cluster, job_id", expr))


def _node_mean(*metrics: tuple[str, str]) -> list[Query]:
    """One ``avg`` over the selected whole GPUs per (metric, legend)."""
    return [Query(f"avg({sel(metric, NODE, WHOLE)})", legend) for metric, legend in metrics]


def gpu_fleet() -> Dashboard:
    utilisation = _per_job("avg", per_gpu_job("gpu_utilization_ratio"))
    board = Board()
    board.stats(
        stat("GPUs", "short", Query(f"count({sel('gpu_info', NODE)})", "GPUs")),
        problem_stat(
            "Unhealthy GPUs",
            count_zero("gpu_health", NODE, WHOLE),
            "unhealthy",
            description="Lost, row-remap failure, or a fatal XID within the health window.",
        ),
        stat(
            "Mean utilisation",
            "percentunit",
            Query(f"avg({sel('gpu_utilization_ratio', NODE)})", "utilisation"),
        ),
        stat("Power draw", "watt", Query(f"sum({sel('gpu_power_watts', NODE)})", "power")),
    )
    board.row(
        ratio_timeseries(
            "GPU utilisation by node",
            Query(f"avg by (instance) ({sel('gpu_utilization_ratio', NODE)})", "{{instance}}"),
        ),
        ratio_timeseries(
            "SM and tensor activity",
            *_node_mean(
                ("gpu_sm_active_ratio", "SM active"),
                ("gpu_sm_occupancy_ratio", "SM occupancy"),
                ("gpu_tensor_active_ratio", "tensor active"),
                ("gpu_dram_active_ratio", "DRAM active"),
            ),
            description="GPM metrics (Hopper and newer), averaged over the selected GPUs.",
        ),
    )
    power = f"sum by (instance) ({sel('gpu_power_watts', NODE)})"
    power_limit = f"sum by (instance) ({sel('gpu_power_limit_watts', NODE)})"
    board.row(
        ratio_timeseries(
            "Memory used by node",
            Query(
                ratio(
                    "sum",
                    "instance",
                    sel("gpu_memory_used_bytes", NODE, WHOLE),
                    sel("gpu_memory_total_bytes", NODE, WHOLE),
                ),
                "{{instance}}",
            ),
        ),
        timeseries(
            "Power by node",
            "watt",
            Query(power, "{{instance}}"),
            Query(power_limit, "{{instance}} limit"),
        ),
        timeseries(
            "Hottest GPU by node",
            "celsius",
            Query(
                f"max by (instance, sensor) ({sel('gpu_temperature_celsius', NODE)})",
                "{{instance}} {{sensor}}",
            ),
        ),
    )
    board.row(
        timeseries(
            "Throttled time by reason",
            "percentunit",
            Query(f"avg by (reason) ({rate('gpu_throttle_seconds_total', NODE)})", "{{reason}}"),
            description="Share of time the clocks were held back (NVML violation counters), "
            "averaged over the selected GPUs.",
            minimum=0,
        ),
        timeseries(
            "Clock event reasons active",
            "short",
            Query(f"sum by (reason) ({sel('gpu_clocks_event_reasons', NODE)})", "{{reason}}"),
            description="GPUs whose clocks are held down by each reason right now.",
        ),
        timeseries(
            "XID errors",
            "short",
            Query(
                f"sum by (instance, xid) ({rate('gpu_xid_errors_total', NODE, fn='increase')})",
                "{{instance}} XID {{xid}}",
            ),
            description="A series appears only after a GPU reported an XID.",
        ),
    )
    board.row(
        timeseries(
            "ECC errors",
            "short",
            Query(
                f"sum by (instance, type) ({rate('gpu_ecc_errors_total', NODE, fn='increase')})",
                "{{instance}} {{type}}",
            ),
        ),
        bargauge(
            "Remapped rows",
            "short",
            Query(f"sum by (state) ({sel('gpu_remapped_rows', NODE)})", "{{state}}"),
            description="Correctable and uncorrectable remapped rows; pending and failure "
            "count GPUs.",
            thresholds=BAD_FROM_ONE,
        ),
        timeseries(
            "PCIe replays",
            "cps",
            Query(f"sum by (instance) ({rate('gpu_pcie_replay_total', NODE)})", "{{instance}}"),
        ),
    )
    board.row(
        table(
            "GPU jobs",
            "none",
            Query(_per_job("count", sel("gpu_job_info", NODE)), name="GPUs", unit="short"),
            Query(utilisation, name="utilisation", unit="percentunit"),
            Query(
                _per_job("avg", per_gpu_job("gpu_tensor_active_ratio", mig=True)),
                name="tensor active",
                unit="percentunit",
            ),
            Query(
                _per_job("sum", per_gpu_job("gpu_memory_used_bytes", mig=True)),
                name="memory used",
                unit="bytes",
            ),
            hide=("Time",),
            sort_by="utilisation",
            description="Slurm jobs with processes on the GPUs (gpu_job_info), joined to "
            "slurm_job_info on cluster and job_id for user, account and partition. Memory "
            "of a GPU shared by several jobs is counted for each of them.",
        )
    )
    pods = f"{sel('gpu_pod_info', NODE)} * on({GPU_KEY}) group_left " + sel(
        "gpu_utilization_ratio", NODE
    )
    board.row(
        ratio_timeseries("GPU utilisation by job", Query(utilisation, "{{job_id}} {{user}}")),
        ratio_timeseries(
            "GPU utilisation by Kubernetes pod",
            Query(
                agg("avg", "site, cluster, namespace, pod, pod_uid", pods),
                "{{namespace}}/{{pod}} {{pod_uid}}",
            ),
        ),
    )
    return dashboard(
        NAME, DESCRIPTION, TAGS, board, [label_variable("instance", "Node", "gpu_info")]
    )
