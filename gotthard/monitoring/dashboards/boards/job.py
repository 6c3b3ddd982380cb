"""The Job dashboard: one Slurm job across its GPUs, its Lustre I/O and its nodes'
Slingshot traffic, from the series ``gotthard job report`` folds over the job's run
(:data:`gotthard.monitoring.components.job.MEASURES`, defined once there)."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.monitoring.components import job
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.shared import SLURM_JOB_INFO, sel
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = (
    "One Slurm job ($job_id): per-GPU utilisation, SM and tensor activity, DRAM bandwidth, "
    "memory and power, its Lustre I/O by job ID and its nodes' Slingshot traffic; "
    "`gotthard job report JOBID` folds the same series over the job's run, with findings."
)
TAGS = ("job", "gpu")
SCOPE = job.DASHBOARD_SCOPE
#: The job, one at a time: the jobs with a process on a GPU in the time range.
VARIABLES = (
    ui.query_variable(
        "job_id",
        "Job",
        f"label_values({sel('gotthard_gpu_job_info')}, job_id)",
        multi=False,
        include_all=False,
    ),
    # the job's nodes, hidden: the panels read their series only (a job's few nodes, not
    # the site's thousands), then join them to the job
    ui.query_variable(
        job.NODES_VARIABLE,
        "Nodes of the job",
        f"label_values({SCOPE.sel('gotthard_gpu_job_info', SCOPE.job)}, instance)",
        regex="/^([^:]+)/",
        hidden=True,
    ),
)
PER_GPU = "{{instance}} GPU {{gpu}}"


def _series(key: str, legend: str = PER_GPU) -> ui.Query:
    return ui.Query(job.MEASURE[key].series(SCOPE), legend)


def _panel(key: str, t: ThresholdValues) -> object:
    measure = job.MEASURE[key]
    if measure.unit == "percentunit":
        lines = {
            "gpu_utilization": ((t[job.IDLE_GPU], "orange"),),
            "tensor_active": ((t[job.TENSOR_UNUSED], "orange"),),
        }.get(key, ())
        return ui.ratio_timeseries(measure.title, _series(key), lines=lines)
    return ui.timeseries(measure.title, measure.unit, _series(key))


def job_efficiency(t: ThresholdValues) -> Dashboard:
    gpus = f"count({job.MEASURE['gpu_utilization'].series(SCOPE)})"
    board = ui.Board()
    board.stats(
        ui.stat("GPUs with a process", "short", ui.Query(gpus, "GPUs")),
        *(
            ui.stat(
                f"Mean {job.MEASURE[key].title}",
                "percentunit",
                ui.Query(f"avg({job.MEASURE[key].series(SCOPE)})", key),
            )
            for key in ("gpu_utilization", "tensor_active")
        ),
        ui.stat(
            "GPU power", "watt", ui.Query(f"sum({job.MEASURE['power'].series(SCOPE)})", "power")
        ),
    )
    board.row(
        ui.table(
            "Slurm job",
            "none",
            ui.Query(
                f"max by (site, cluster, job_id, user, account, partition) "
                f"({SCOPE.sel(SLURM_JOB_INFO, SCOPE.job)})",
                name="running",
            ),
            description="The job as the Slurm exporter lists it while it runs. What it asked "
            "for (nodes, GPUs, CPUs, memory, time limit) is in `gotthard job report`, which "
            "asks Slurm.",
        ),
        h=4,
    )
    board.row(_panel("gpu_utilization", t), _panel("sm_active", t), _panel("tensor_active", t))
    board.row(_panel("dram_active", t), _panel("memory_used", t), _panel("power", t))
    board.row(
        ui.timeseries(
            "Lustre I/O of the job",
            "Bps",
            _series("lustre_read", "read"),
            _series("lustre_write", "write"),
            description="Lustre job stats (lustre_job_*_bytes_total) of this job ID, summed "
            "over the OSTs.",
        ),
        ui.timeseries(
            job.MEASURE["lustre_metadata"].title,
            "ops",
            _series("lustre_metadata", "metadata"),
            description="Operations of this job ID on the MDTs (job stats).",
        ),
        ui.timeseries(
            job.MEASURE["slingshot_bytes"].title,
            "Bps",
            _series("slingshot_bytes", "{{direction}}"),
            description="Slingshot bytes of the nodes holding a GPU of the job (node = the "
            "host of the exporters' instance), including other jobs' traffic on them.",
        ),
    )
    return ui.dashboard(job.DASHBOARD, DESCRIPTION, TAGS, board, VARIABLES)
