"""Jobs: one Slurm job's efficiency across its GPUs, Lustre I/O and Slingshot traffic.

The thresholds of the job report's findings (``gotthard job report``, ``gotthard job
epilog``; tunable in ``[monitoring.thresholds]`` like every other) and the **queries
shared by the report and the Job dashboard**, defined once here: each :class:`Measure`
is one time series of the job (per GPU, or of the whole job), written for a
:class:`Scope` that selects the job either by the dashboard's variables or by one job's
values. The dashboard plots the series (reading the recorded per-job Lustre rates); the
report folds each over the job's run time (:meth:`Measure.over`, from the raw counters).
Pure strings, no grafanalib.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gotthard.monitoring.components import lustre, slingshot
from gotthard.monitoring.rule_model import NODE_REGEX, AlertRule, RecordingRule
from gotthard.monitoring.shared import GPU_KEY, SLURM_JOB_INFO
from gotthard.monitoring.thresholds import ThresholdValues, per_second, ratio

COMPONENT = "job"
DASHBOARD = "job"

# --- thresholds of the findings --------------------------------------------------------

IDLE_GPU = ratio(
    "job_gpu_idle_ratio",
    0.10,
    "a GPU whose utilisation averaged over the job stays under this is idle",
)
BUSY_GPU = ratio(
    "job_gpu_busy_ratio",
    0.50,
    "a job whose GPUs average at least this utilisation is GPU-heavy",
)
TENSOR_UNUSED = ratio(
    "job_tensor_active_ratio",
    0.01,
    "a GPU-heavy job whose tensor cores are active less than this share leaves them unused",
)
IO_BOUND_BYTES = per_second(
    "job_lustre_busy_bytes_per_second",
    100e6,
    "Lustre read+write rate of a job, averaged over its run, above which an idle-GPU job "
    "is I/O-bound",
)
MEMORY_USED = ratio(
    "job_memory_used_ratio",
    0.25,
    "a job whose peak memory is under this share of the memory it requested wastes memory",
)
TIME_USED = ratio(
    "job_time_limit_used_ratio",
    0.25,
    "a finished job whose run time is under this share of its time limit asked far too long",
)

#: The thresholds of the report's findings (none is an alert's).
FINDINGS = frozenset(
    t.name for t in (IDLE_GPU, BUSY_GPU, TENSOR_UNUSED, IO_BOUND_BYTES, MEMORY_USED, TIME_USED)
)

#: No rule of this component: the findings are the report's (efficiency alerts stay the
#: GPU component's GPUIdleWhileAllocated, routed to the users, not the pager).
RECORDING_RULES: tuple[RecordingRule, ...] = ()


def alerts(_values: ThresholdValues) -> tuple[AlertRule, ...]:
    return ()


# --- the shared queries ----------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """How the queries select the job: regexes of site and cluster, the job's id."""

    site: str = "$site"
    cluster: str = "$cluster"
    job_id: str = "$job_id"
    #: A regex of the job's nodes (hosts of its GPU exporters' ``instance``), or "" for
    #: any node: what narrows the per-GPU and per-NIC series to the job's nodes before
    #: the join, so that a query reads the job's series, not every node's of the site.
    nodes: str = ""

    @property
    def on_nodes(self) -> tuple[str, ...]:
        """The ``instance`` matcher of :attr:`nodes` (none without them)."""
        return (f'instance=~"({self.nodes})(:[0-9]+)?"',) if self.nodes else ()

    def matchers(self, *extra: str) -> str:
        """``site=~"...", cluster=~"..."`` and *extra*, for a selector's braces."""
        return ", ".join((f'site=~"{self.site}"', f'cluster=~"{self.cluster}"', *extra))

    def sel(self, metric: str, *extra: str) -> str:
        return metric + "{" + self.matchers(*extra) + "}"

    @property
    def job(self) -> str:
        return f'job_id="{self.job_id}"'


#: The Job dashboard's variable of the job's nodes (hidden; chosen from ``$job_id``).
NODES_VARIABLE = "job_node"
#: The dashboard's scope: its ``$site``, ``$cluster``, ``$job_id`` and ``$job_node``
#: variables.
DASHBOARD_SCOPE = Scope(nodes=f"${NODES_VARIABLE}")

#: How the report folds a series over the job's run: its average, its peak, or its
#: total (a per-second series integrated over the run: joules from watts, bytes from a
#: byte rate).
Fold = Literal["average", "peak", "total"]
#: A whole GPU (not a MIG instance) of a GPU metric.
_WHOLE_GPU = 'gpu_instance=""'
#: The GPU exporter's (GPU, job) attribution series.
_GPU_JOB_INFO = "gotthard_gpu_job_info"
#: The metadata operations of Lustre's job stats: those counted on an MDT.
_MDT = 'component="mdt"'


def _job_gpus(scope: Scope) -> str:
    """One series per whole GPU the job has a process on, valued 1."""
    return f"max by ({GPU_KEY}) ({scope.sel('gotthard_gpu_job_info', scope.job)})"


def _per_gpu(scope: Scope, metric: str) -> str:
    """*metric* of each whole GPU of the job (``gotthard_gpu_job_info`` as the many side is not
    needed: ``max by`` reduces it to one series per GPU first)."""
    gpus = scope.sel(metric, _WHOLE_GPU, *scope.on_nodes)
    return f"{_job_gpus(scope)}\n* on ({GPU_KEY}) group_left ()\n{gpus}"


def _job_nodes(scope: Scope) -> str:
    """One series per node (``node``: the host of the exporter's ``instance``) holding a
    GPU of the job."""
    info = (
        f'label_replace({scope.sel("gotthard_gpu_job_info", scope.job)}, "node", "$1", "instance", '
    )
    return f'max by (site, cluster, node) ({info}"{NODE_REGEX}"))'


def _on_job_nodes(scope: Scope, series: str, by: str) -> str:
    """*series* (with an ``instance``) of the job's nodes, summed by *by*."""
    labelled = f'label_replace({series}, "node", "$1", "instance", "{NODE_REGEX}")'
    joined = f"{labelled}\n* on (site, cluster, node) group_left ()\n{_job_nodes(scope)}"
    return f"sum by ({by}) (\n{joined}\n)"


@dataclass(frozen=True)
class Measure:
    """One series of the job, shared by the Job dashboard's panels and the report."""

    key: str
    title: str
    #: Grafana unit of the series
    unit: str
    #: ``gpu``: one series per GPU (labels of :data:`GPU_KEY`); ``job``: the whole job,
    #: by ``direction`` or ``operation`` where it has one.
    per: Literal["gpu", "job"]
    #: How the report folds the series over the run: average, peak or total (a rate
    #: integrated over the run).
    fold: Fold
    #: Unit of the report's value.
    report_unit: str
    metric: str
    #: Other labels of a job-wide series (``direction``).
    by: str = ""
    #: The recording rule of the same rate (5-minute), where one records it: per job and
    #: file system (Lustre), per NIC and direction (Slingshot); what the dashboard reads
    #: instead of rating every job x target or every NIC counter series.
    recorded: str = ""

    def series(self, scope: Scope, rate: str | None = None) -> str:
        """The PromQL of the series; *rate* is the range of the counters' ``rate()``.

        Without one (the dashboard), a measure with a :attr:`recorded` rule reads it, and
        the others rate over ``$__rate_interval``. With one (the report), the raw counters
        are rated over it: a 5-minute rate integrated over the run would lag the job's
        last minutes (and miss most of a job of a few minutes), and a Prometheus that did
        not evaluate the rules over the run (history loaded from blocks) has no record."""
        if self.key == "slingshot_bytes":
            nics = (
                scope.sel(self.recorded, *scope.on_nodes)
                if rate is None
                else f"rate({scope.sel(self.metric, *scope.on_nodes)}{rate})"
            )
            return _on_job_nodes(scope, nics, f"site, cluster, {self.by}")
        if rate is None and self.recorded:
            return f"sum by (site, cluster) ({scope.sel(self.recorded, scope.job)})"
        rate = rate or "[$__rate_interval]"
        if self.key == "lustre_metadata":
            inner = f"rate({scope.sel(self.metric, scope.job, _MDT)}{rate})"
            return f"sum by (site, cluster) ({inner})"
        if self.key.startswith("lustre_"):
            return f"sum by (site, cluster) (rate({scope.sel(self.metric, scope.job)}{rate}))"
        return _per_gpu(scope, self.metric)

    def over(self, scope: Scope, seconds: int, step: int) -> str:
        """The series folded over the *seconds* before the evaluation time, sampled every
        *step* seconds (the report evaluates it at the job's end)."""
        window = f"[{seconds}s:{step}s]"
        inner = self.series(scope, rate=f"[{max(4 * step, 60)}s]")
        if self.fold == "average":
            return f"avg_over_time((\n{inner}\n){window})"
        if self.fold == "peak":
            return f"max_over_time((\n{inner}\n){window})"
        return f"sum_over_time((\n{inner}\n){window}) * {step}"


#: Every measure, in the order of the report and of the dashboard's panels.
MEASURES: tuple[Measure, ...] = (
    Measure(
        "gpu_utilization",
        "GPU utilisation",
        "percentunit",
        "gpu",
        "average",
        "ratio",
        "gotthard_gpu_utilization_ratio",
    ),
    Measure(
        "sm_active",
        "SM active",
        "percentunit",
        "gpu",
        "average",
        "ratio",
        "gotthard_gpu_sm_active_ratio",
    ),
    Measure(
        "tensor_active",
        "Tensor active",
        "percentunit",
        "gpu",
        "average",
        "ratio",
        "gotthard_gpu_tensor_active_ratio",
    ),
    Measure(
        "dram_active",
        "DRAM bandwidth",
        "percentunit",
        "gpu",
        "average",
        "ratio",
        "gotthard_gpu_dram_active_ratio",
    ),
    Measure(
        "memory_used",
        "GPU memory used",
        "bytes",
        "gpu",
        "peak",
        "bytes",
        "gotthard_gpu_memory_used_bytes",
    ),
    Measure("power", "GPU power", "watt", "gpu", "total", "joules", "gotthard_gpu_power_watts"),
    Measure(
        "lustre_read",
        "Lustre read",
        "Bps",
        "job",
        "total",
        "bytes",
        "gotthard_lustre_job_read_bytes_total",
        recorded=lustre.JOB_READ,
    ),
    Measure(
        "lustre_write",
        "Lustre write",
        "Bps",
        "job",
        "total",
        "bytes",
        "gotthard_lustre_job_write_bytes_total",
        recorded=lustre.JOB_WRITE,
    ),
    Measure(
        "lustre_metadata",
        "Lustre metadata operations",
        "ops",
        "job",
        "total",
        "operations",
        "gotthard_lustre_job_operations_total",
        recorded=lustre.JOB_MDT_OPERATIONS,
    ),
    Measure(
        "slingshot_bytes",
        "Slingshot traffic of the job's nodes",
        "Bps",
        "job",
        "total",
        "bytes",
        "gotthard_slingshot_bytes_total",
        by="direction",
        recorded=slingshot.BYTES.nic_record,
    ),
)
MEASURE: dict[str, Measure] = {m.key: m for m in MEASURES}


def seen(scope: Scope, lookback: int) -> str:
    """Where the job had series within the last *lookback* seconds, by site and cluster."""
    return (
        f"count by (site, cluster) (last_over_time({scope.sel(SLURM_JOB_INFO, scope.job)}"
        f"[{lookback}s]))\n"
        f"or count by (site, cluster) (last_over_time({scope.sel(_GPU_JOB_INFO, scope.job)}"
        f"[{lookback}s]))"
    )


def first_last(scope: Scope, lookback: int, step: int) -> tuple[str, str]:
    """The Unix times of the job's first and last samples within *lookback* (looked at
    every *step* seconds): its run, where Slurm no longer knows it. ``timestamp()`` of a
    selector is its sample's own time, so neither is rounded to the step."""
    slurm, gpu = scope.sel(SLURM_JOB_INFO, scope.job), scope.sel("gotthard_gpu_job_info", scope.job)
    stamps = f"timestamp({slurm}) or timestamp({gpu})"
    window = f"[{lookback}s:{step}s]"
    return f"min_over_time(min({stamps}){window})", f"max_over_time(max({stamps}){window})"


def jobs_with_gpus(scope: Scope, lookback: int) -> str:
    """Every job with a GPU process within *lookback* seconds, with the ``user`` and
    ``account`` of its Slurm series where the Slurm exporter listed it."""
    window = f"[{lookback}s]"
    gpus = f"group by (site, cluster, job_id) (last_over_time({scope.sel(_GPU_JOB_INFO)}{window}))"
    owners = (
        "group by (site, cluster, job_id, user, account) "
        f"(last_over_time({scope.sel(SLURM_JOB_INFO)}{window}))"
    )
    joined = f"{gpus}\n* on (site, cluster, job_id) group_left (user, account)\n{owners}"
    return f"(\n{joined}\n)\nor on (site, cluster, job_id) {gpus}"
