"""GPUs: NVML health, XIDs, ECC, throttling and utilisation per Slurm job."""

from __future__ import annotations

from functools import partial

from gotthard.exporters.gpu.xid import FATAL_XIDS
from gotthard.monitoring.components.slurm import respecting_maintenance
from gotthard.monitoring.rule_model import (
    GPU,
    NODE_REGEX,
    AlertRule,
    LastReading,
    RecordingRule,
    Severity,
    above,
    on_condition,
)
from gotthard.monitoring.shared import GPU_JOB_INFO, GPU_KEY, SC, SLURM_JOB_INFO, gpu_jobs
from gotthard.monitoring.thresholds import (
    ThresholdValues,
    duration,
    num,
    pct,
    per_second,
    ratio,
    seconds,
)

COMPONENT = "gpu"
DASHBOARD = "gpu-fleet"

#: XIDs that page: every XID after which the exporter marks the GPU unhealthy.
PAGING_XIDS = tuple(sorted(FATAL_XIDS))

THERMAL_THROTTLE = ratio("gpu_thermal_throttle_ratio", 0.20, "share of time thermally throttled")
POWER_THROTTLE = ratio("gpu_power_throttle_ratio", 0.50, "share of time held at the power limit")
IDLE_UTILIZATION = ratio("gpu_idle_utilization", 0.05, "utilisation under which a held GPU is idle")
LOST_LOOKBACK = seconds(
    "gpu_lost_lookback_seconds",
    86400,
    "how long a lost or failed GPU whose series stopped counts as still lost or failed",
)
XID_WINDOW = seconds(
    "gpu_xid_new_seconds", 600, "how long after its event (its own timestamp) an XID is new"
)
NVLINK_ERRORS = per_second("gpu_nvlink_errors_per_second", 1.0, "NVLink errors/s on one GPU")
PCIE_REPLAYS = per_second("gpu_pcie_replays_per_second", 1.0, "PCIe replays/s on one GPU")

#: Utilisation of every GPU a job holds, one series per (GPU, job).
_GPU_JOBS = gpu_jobs("gotthard_gpu_utilization_ratio")
JOB_UTILIZATION = "site_cluster_job_id:gotthard_gpu_utilization_ratio:avg"
#: Tensor-core activity and memory used per job, over its GPUs and MIG instances (each
#: job's own instance of a MIG GPU); the GPU fleet dashboard's per-job views.
JOB_TENSOR_ACTIVE = "site_cluster_job_id:gotthard_gpu_tensor_active_ratio:avg"
JOB_MEMORY_USED = "site_cluster_job_id:gotthard_gpu_memory_used_bytes:sum"
#: The owner (user, account, partition) of each job that holds a GPU: what the per-job
#: views join (:func:`~gotthard.monitoring.shared.owner_join`) instead of every running
#: job's ``gotthard_slurm_job_info``, which they would read at every step.
JOB_OWNERS = "site_cluster_job_id_user_account_partition:gotthard_slurm_job_info:gpu_jobs"
CLUSTER_UTILIZATION = "site_cluster:gotthard_gpu_utilization_ratio:avg"

#: The GPU fleet dashboard's fleet-wide panels read these, never every GPU at every step
#: of a range (at Alps size, 10,800 GPUs x 2,880 steps for a day: tens of seconds). Slow
#: records: a point every few minutes is enough for a day's view, and no alert reads them.
CLUSTER_THROTTLING = "site_cluster_reason:gotthard_gpu_throttle_seconds:avg_rate5m"
CLUSTER_CLOCK_EVENTS = "site_cluster_reason:gotthard_gpu_clocks_event_reasons:sum"
CLUSTER_ECC_ERRORS = "site_cluster_type:gotthard_gpu_ecc_errors:rate5m"
CLUSTER_POWER = "site_cluster:gotthard_gpu_power_watts:sum"
CLUSTER_POWER_LIMIT = "site_cluster:gotthard_gpu_power_limit_watts:sum"
#: How many nodes (jobs) a fleet "top" record keeps per cluster.
TOP_NODES = 10
HOTTEST_NODES = f"site_cluster_instance_sensor:gotthard_gpu_temperature_celsius:top{TOP_NODES}_max"
FULLEST_NODES = f"site_cluster_instance:gotthard_gpu_memory_used:top{TOP_NODES}_ratio"
LEAST_UTILIZED_JOBS = f"site_cluster_job_id:gotthard_gpu_utilization_ratio:bottom{TOP_NODES}_avg"
_NODE_MEMORY = 'sum by (site, cluster, instance) (gotthard_gpu_memory_{}_bytes{{gpu_instance=""}})'


def _slow(record: str, expr: str) -> RecordingRule:
    return RecordingRule(COMPONENT, record, expr, cadence="slow")


FLEET_RULES = (
    _slow(
        CLUSTER_THROTTLING,
        "avg by (site, cluster, reason) (rate(gotthard_gpu_throttle_seconds_total[5m]))",
    ),
    _slow(
        CLUSTER_CLOCK_EVENTS, "sum by (site, cluster, reason) (gotthard_gpu_clocks_event_reasons)"
    ),
    _slow(
        CLUSTER_ECC_ERRORS, "sum by (site, cluster, type) (rate(gotthard_gpu_ecc_errors_total[5m]))"
    ),
    _slow(CLUSTER_POWER, f"sum by ({SC}) (gotthard_gpu_power_watts)"),
    _slow(CLUSTER_POWER_LIMIT, f"sum by ({SC}) (gotthard_gpu_power_limit_watts)"),
    _slow(
        HOTTEST_NODES,
        f"topk by (site, cluster, sensor) (\n  {TOP_NODES},\n"
        "  max by (site, cluster, instance, sensor) (gotthard_gpu_temperature_celsius)\n)",
    ),
    _slow(
        FULLEST_NODES,
        f"topk by ({SC}) (\n  {TOP_NODES},\n  {_NODE_MEMORY.format('used')}\n"
        f"  /\n  {_NODE_MEMORY.format('total')}\n)",
    ),
    _slow(LEAST_UTILIZED_JOBS, f"bottomk by ({SC}) ({TOP_NODES}, {JOB_UTILIZATION})"),
)

RECORDING_RULES = (
    RecordingRule(
        COMPONENT,
        "site_cluster_job_id:gotthard_gpu_utilization_ratio:sum",
        f"sum by (site, cluster, job_id) (\n  {_GPU_JOBS}\n)",
    ),
    RecordingRule(
        COMPONENT,
        "site_cluster_job_id:gotthard_gpu_utilization_ratio:count",
        f"count by (site, cluster, job_id) (\n  {_GPU_JOBS}\n)",
    ),
    RecordingRule(
        COMPONENT,
        JOB_UTILIZATION,
        "site_cluster_job_id:gotthard_gpu_utilization_ratio:sum"
        "\n/\nsite_cluster_job_id:gotthard_gpu_utilization_ratio:count",
    ),
    RecordingRule(
        COMPONENT, CLUSTER_UTILIZATION, f"avg by ({SC}) (gotthard_gpu_utilization_ratio)"
    ),
    # for dashboards only, where a point every few minutes is enough
    RecordingRule(
        COMPONENT,
        JOB_TENSOR_ACTIVE,
        "avg by (site, cluster, job_id) (\n"
        f"  {gpu_jobs('gotthard_gpu_tensor_active_ratio', mig=True)}\n)",
        cadence="slow",
    ),
    RecordingRule(
        COMPONENT,
        JOB_MEMORY_USED,
        "sum by (site, cluster, job_id) (\n"
        f"  {gpu_jobs('gotthard_gpu_memory_used_bytes', mig=True)}\n)",
        cadence="slow",
    ),
    RecordingRule(
        COMPONENT,
        JOB_OWNERS,
        f"max by (site, cluster, job_id, user, account, partition) ({SLURM_JOB_INFO})"
        "\nand on (cluster, job_id)\ngotthard_gpu_job_info",
        cadence="slow",
    ),
    *FLEET_RULES,
)

#: The readings that hold while a GPU's series are gone (:class:`LastReading`): lost,
#: and a failed row remapping, until the GPU (or a board in its slot) reads otherwise.
LOST = LastReading(
    COMPONENT,
    "site_cluster_instance_gpu_uuid",
    "gotthard_gpu_lost",
    ("lost", "== 1"),
    ("not_lost", "!= 1"),
    LOST_LOOKBACK,
)
ROW_REMAP_FAILURE = LastReading(
    COMPONENT,
    "site_cluster_instance_gpu_uuid_state",
    'gotthard_gpu_remapped_rows{state="failure"}',
    ("failure", "> 0"),
    ("no_failure", "<= 0"),
    LOST_LOOKBACK,
)
LAST_READINGS = (LOST, ROW_REMAP_FAILURE)

#: A GPU alert's dashboard link opens the GPU fleet on its node (the node variable has no
#: "All": without it, the dashboard would open on the first node).
_alert = partial(
    AlertRule, component=COMPONENT, dashboard=DASHBOARD, url_labels=("site", "cluster", "instance")
)
_XIDS = "|".join(str(xid) for xid in PAGING_XIDS)
#: A GPU's slot on its node: the NVML index, whichever board (UUID) sits there.
_SLOT = "site, cluster, instance, gpu"
#: A whole GPU (not a MIG instance) of the alert's series.
_WHOLE = '{gpu_instance=""}'
#: PromQL that returns the GPU of the alert only while it reports healthy.
_GPU_HEALTHY = (
    'gotthard_gpu_health{gpu_instance="", instance="$labels.instance", uuid="$labels.uuid"} == 1'
)
#: The GPU alerts that fire on a node in maintenance too: an idle allocation is the job's.
_ALSO_IN_MAINTENANCE = frozenset({"GPUIdleWhileAllocated"})


#: How GPU throttling reads in a description and a summary, by NVML reason.
_THROTTLING = {
    "thermal": ("thermally throttled", "A GPU is throttled by temperature."),
    "power": ("power-throttled", "A GPU is held at its power limit."),
}


def _throttling(reason: str, ratio: float, for_: str, severity: Severity) -> AlertRule:
    """A GPU whose clocks *reason* held back more than *ratio* of the time for *for_*."""
    state, summary = _THROTTLING[reason]
    minutes = for_.removesuffix("m")
    return _alert(
        name=f"GPU{reason.capitalize()}Throttling",
        expr=f'rate(gotthard_gpu_throttle_seconds_total{{reason="{reason}"}}[5m]) > {num(ratio)}',
        for_=for_,
        severity=severity,
        summary=summary,
        description=GPU
        + f" has been {state} "
        + "{{ $value | humanizePercentage }}"
        + f" of the time for {minutes} minutes.",
        expr_summary=f"{reason} throttling > {pct(ratio)} of the time (5-minute rate)",
    )


def _rate(name: str, expr: str, limit: float, what: str) -> AlertRule:
    """A GPU whose 5-minute rate of *what* (*expr*) stays above *limit* for 15 minutes."""
    return above(
        _alert,
        name,
        expr,
        limit,
        "15m",
        "warning",
        f"A GPU has a high rate of {what}.",
        GPU + " counts {{ $value | humanize }} " + what + " per second.",
        f"{what} > {num(limit)}/s (5-minute rate) for 15 minutes",
    )


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    return tuple(respecting_maintenance(rule, _ALSO_IN_MAINTENANCE) for rule in _alerts(t))


def _alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    idle, lookback, xid_window = t[IDLE_UTILIZATION], duration(t[LOST_LOOKBACK]), t[XID_WINDOW]
    lost, failed = (reading.expr(t).replace("\n", "\n  ") for reading in (LOST, ROW_REMAP_FAILURE))
    return (
        _alert(
            name="GPULost",
            # NVML's word only: gotthard_gpu_lost 1 (GPU_IS_LOST, or listed by this exporter and
            # gone from NVML's device list since). Its last reading within the lookback: a lost
            # GPU whose series stop (exporter restart, node reboot) stays lost until it reads
            # gotthard_gpu_lost 0, or until its slot does (a new board, or a GPU lost before its
            # exporter started, without a UUID: "unknown") while no GPU there reads lost.
            # Missing data alone (a restart, a scrape gap, a target down) never fires it.
            # The last reading of a GPU whose series stopped: LOST's sparse records.
            expr=(
                f'label_replace(\n  {lost},\n  "uuid", "unknown", "uuid", ""\n)'
                f"\nunless on ({_SLOT})\n"
                f"(gotthard_gpu_lost == 0 unless on ({_SLOT}) gotthard_gpu_lost == 1)"
            ),
            for_="1m",
            severity="critical",
            summary="A GPU has fallen off the bus or been lost by the driver.",
            description=GPU + " is lost: NVML answers GPU_IS_LOST or no longer lists it; "
            "jobs on it hang or fail.",
            expr_summary=(
                f"last `gotthard_gpu_lost` reading (within {lookback}) is 1: NVML's GPU_IS_LOST, "
                "or the GPU left NVML's device list while the exporter ran"
            ),
            repair_query=_GPU_HEALTHY,
        ),
        _alert(
            name="GPUMissingFromNode",
            url_labels=("site", "cluster"),  # per Slurm node: no instance
            # Slurm's GRES count against the GPUs NVML lists on the node: catches a GPU
            # missing since the exporter started (GPULost needs to have seen it)
            expr=(
                'max by (site, cluster, node) (gotthard_slurm_node_gpus{state="total"})\n>\n'
                "count by (site, cluster, node) (\n"
                f"  label_replace(gotthard_gpu_health{_WHOLE},"
                f' "node", "$1", "instance", "{NODE_REGEX}")'
                "\n)"
            ),
            for_="10m",
            severity="warning",
            summary="A node has fewer GPUs than Slurm configures for it.",
            description=(
                "Node {{ $labels.node }} in {{ $labels.site }}/{{ $labels.cluster }} lists "
                "fewer GPUs in NVML than the {{ $value }} its Slurm GRES configures."
            ),
            expr_summary="GPUs NVML lists on a node < the node's Slurm GRES GPU count",
        ),
        _alert(
            name="GPUFatalXid",
            # new by the XID's own timestamp, taken by the exporter when the event came: an
            # old XID stays old through any scrape or Prometheus gap, and a restarted
            # exporter has seen no XID yet
            expr=f"time() - gotthard_gpu_xid_last_timestamp_seconds"
            f'{{xid=~"{_XIDS}"}} < {num(xid_window)}',
            for_="0s",
            severity="critical",
            summary="A GPU reported a fatal XID error.",
            description=(
                GPU + " reported XID {{ $labels.xid }} {{ $value | humanizeDuration }} ago; "
                "the GPU needs a reset or the node a reboot."
            ),
            expr_summary=(
                f"XID {', '.join(map(str, PAGING_XIDS))} seen by the exporter within the last "
                f"{duration(xid_window)} (`gotthard_gpu_xid_last_timestamp_seconds`)"
            ),
        ),
        on_condition(
            _alert,
            "GPURowRemapPending",
            'gotthard_gpu_remapped_rows{state="pending"} > 0',
            "15m",
            "warning",
            "A GPU has a memory row remap pending a reset.",
            GPU + " has a memory row remapping pending; it takes effect only after "
            "the GPU is reset.",
            " for 15 minutes",
        ),
        _rate(
            "GPUNVLinkErrors",
            # 5 series per GPU: the exporter sums each error type over the GPU's links
            # (the per-link series, opt-in, have a name of their own); `link` goes too for
            # exporters of earlier releases, which labelled this family by link
            "sum without (link, type) (rate(gotthard_gpu_nvlink_errors_total[5m]))",
            t[NVLINK_ERRORS],
            "NVLink errors",
        ),
        _rate(
            "GPUPCIeReplays",
            "rate(gotthard_gpu_pcie_replays_total[5m])",
            t[PCIE_REPLAYS],
            "PCIe replays",
        ),
        on_condition(
            _alert,
            "GPUUnhealthy",
            "gotthard_gpu_health == 0",
            "5m",
            "warning",
            "A GPU is marked unhealthy.",
            GPU + " has been unhealthy (lost, row-remap "
            "failure or a recent fatal XID) for 5 minutes.",
            " (any cause)",
        ),
        _alert(
            name="GPUUncorrectableECCErrors",
            expr='increase(gotthard_gpu_ecc_errors_total{type="uncorrected"}[10m]) > 0',
            for_="0s",
            severity="warning",
            summary="A GPU has uncorrectable ECC memory errors.",
            description=(
                GPU + " counted {{ $value | humanize }} "
                "uncorrectable ECC errors in the last 10 minutes."
            ),
            expr_summary="uncorrected ECC errors increased within 10 minutes",
        ),
        _alert(
            name="GPURowRemapFailure",
            # the last reading within the lookback (ROW_REMAP_FAILURE's records once the
            # series stop): a failed GPU whose series stop stays failed until its slot
            # reads no failure (the GPU reset, or a new board)
            expr=(
                f"(\n  {failed}\n)"
                f'\nunless on ({_SLOT})\ngotthard_gpu_remapped_rows{{state="failure"}} == 0'
            ),
            for_="0s",
            severity="critical",
            summary="GPU memory row remapping failed.",
            description=GPU
            + " could not remap a failing memory row; it must be taken out of service.",
            expr_summary=(
                f'last `gotthard_gpu_remapped_rows{{state="failure"}}` reading (within {lookback})'
                " > 0, "
                "until the GPU reads no failure"
            ),
        ),
        _throttling("thermal", t[THERMAL_THROTTLE], "15m", "warning"),
        _throttling("power", t[POWER_THROTTLE], "30m", "info"),
        _alert(
            name="GPUIdleWhileAllocated",
            expr=(
                f"{GPU_JOB_INFO}\n* on ({GPU_KEY}) group_left ()\n"
                f"(avg_over_time(gotthard_gpu_utilization_ratio[15m]) < {num(idle)})"
            ),
            for_="45m",
            severity="warning",
            summary="A GPU held by a job is idle.",
            description=(
                "GPU {{ $labels.gpu }} on {{ $labels.instance }} in "
                "{{ $labels.site }}/{{ $labels.cluster }} is held by Slurm job "
                "{{ $labels.job_id }} but has averaged {{ $value | humanizePercentage }} "
                "utilisation for an hour."
            ),
            expr_summary=(
                f"GPU with a job (`gotthard_gpu_job_info`) under {pct(idle)} utilisation "
                "(15-minute average)"
            ),
            # the job's user's to act on: the efficiency receiver, never a page or ticket
            audience="users",
        ),
    )
