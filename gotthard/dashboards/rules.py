"""Recording and alerting rules for Prometheus, as data: the one place they are defined.

``gotthard rules build`` renders them to ``recording.rules.yml`` and ``alerts.rules.yml``
(see :func:`render_recording_rules` and :func:`render_alerting_rules`).

Conventions (monitoring-mixins, prometheus.io "recording rules"):

* Recording rules are named ``level:metric:operations``: ``level`` lists the labels the
  result keeps (``site_cluster_partition``), ``metric`` is the source metric (``_total``
  stripped when it is rated), ``operations`` are the operations, newest first
  (``ratio_rate5m``). Ratios aggregate numerator and denominator separately.
* Alerts are CamelCase with a component prefix (``Slurm``, ``GPU``, ``Slingshot``,
  ``Lustre``, ``Gotthard``, ``DR``, ``Security``). Each has a ``severity`` label
  (``critical`` pages, ``warning`` opens a ticket, ``info`` is not routed), a near-static
  ``summary``, a templated ``description``, a ``runbook_url`` and a ``dashboard_url``.
* Every series carries the ``site`` and ``cluster`` target labels, and every rule keeps
  them, so Alertmanager can route by site and group by cluster.

Thresholds are module constants so that the rules, the unit tests and docs/alerts.md
agree. Metric names that the exporters have not shipped yet are listed, with the
assumptions made about them, in docs/alerts.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

#: Grafana dashboard uids, by slug of the dashboard title (``gotthard-`` + slug). The
#: dashboards area builds its dashboards with exactly these uids.
DASHBOARD_UIDS: Mapping[str, str] = {
    "site-overview": "gotthard-site-overview",
    "slurm-cluster": "gotthard-slurm-cluster",
    "gpu-fleet": "gotthard-gpu-fleet",
    "slingshot-network-health": "gotthard-slingshot-network-health",
    "lustre-storage": "gotthard-lustre-storage",
    "dr": "gotthard-dr",
    "security-compliance": "gotthard-security-compliance",
}

#: ``runbook_url`` is ``<base>/<AlertName>.md``; the default points at docs/runbooks/.
DEFAULT_RUNBOOK_BASE_URL = "https://gotthard.example.org/docs/runbooks"
#: ``dashboard_url`` is ``<base>/d/<uid>?var-site=..&var-cluster=..``.
DEFAULT_DASHBOARD_BASE_URL = "https://grafana.example.org"

#: Components in file order; each has one recording group and one alerting group.
COMPONENTS: tuple[str, ...] = ("gotthard", "slurm", "gpu", "slingshot", "lustre", "dr", "security")


def group_name(component: str, kind: Literal["recording", "alerts"]) -> str:
    """``gotthard-slurm.alerts``; Gotthard's own rules are ``gotthard-self.*``."""
    stem = "self" if component == "gotthard" else component
    return f"gotthard-{stem}.{kind}"


# --- thresholds ----------------------------------------------------------------------------

#: node states that make a node unavailable to the scheduler (slurm_nodes{state})
SLURM_UNAVAILABLE_STATES = ("down", "drained", "draining", "fail", "failing")
SLURM_UNAVAILABLE_RATIO = 0.10
SLURM_PENDING_RESOURCES_JOBS = 100
SLURM_SCHEDULER_CYCLE_SECONDS = 2.0

#: XIDs that page (issue 5: GPU lost or XID 48/79/94/95). The exporter's gpu_health also
#: turns 0 on the other fatal XIDs (64, 74, 92, 119, 120, 140): GPUUnhealthy covers them.
GPU_PAGING_XIDS = (48, 79, 94, 95)
GPU_THERMAL_THROTTLE_RATIO = 0.20
GPU_POWER_THROTTLE_RATIO = 0.50
GPU_IDLE_UTILIZATION = 0.05

#: HPE cxi_healthcheck link_flap_check: fewer restarts than these is healthy.
SLINGSHOT_FLAPS_1H = 5
SLINGSHOT_FLAPS_10H = 10
#: corrected-codeword BER as cxi_stat -r computes it (codeword rate / link bit rate)
SLINGSHOT_CORRECTED_BER = 1e-6
#: retransmission (SPT) timeouts per second on one NIC
SLINGSHOT_SPT_TIMEOUTS_PER_SECOND = 1.0

LUSTRE_OST_FILL_WARNING = 0.85
LUSTRE_OST_FILL_CRITICAL = 0.90
LUSTRE_OST_FILL_SPREAD = 0.20
LUSTRE_MDT_LATENCY_SECONDS = 0.05

#: backups run daily: a last success older than a day plus two hours of slack is late
DR_BACKUP_MAX_AGE_SECONDS = 26 * 3600
DR_RTO_TARGET_SECONDS = 3600


#: Components whose alerts are about one host and carry a ``node`` label.
NODE_COMPONENTS = ("gotthard", "gpu", "slingshot")
#: ``instance`` is ``host:port``; ``node`` is the host.
NODE_REGEX = "([^:]+)(?::[0-9]+)?"


@dataclass(frozen=True)
class RecordingRule:
    component: str
    record: str
    expr: str


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule. Alerts of node-level components also get a ``node`` label."""

    component: str
    name: str
    expr: str
    #: Prometheus duration; "0s" fires on the first evaluation that matches
    for_: str
    severity: Severity
    summary: str
    description: str
    #: key of DASHBOARD_UIDS
    dashboard: str
    #: one line for docs/alerts.md: what the expression means
    expr_summary: str

    @property
    def promql(self) -> str:
        """The rule's expression as written to alerts.rules.yml.

        Alerts about one host (components in NODE_COMPONENTS) add a ``node`` label, the
        ``instance`` without its port, for the runbook webhook (issue 6) to act on.
        """
        if self.component not in NODE_COMPONENTS:
            return self.expr
        inner = self.expr.replace("\n", "\n  ")
        return f'label_replace(\n  {inner},\n  "node", "$1", "instance", "{NODE_REGEX}"\n)'

    def runbook_url(self, base: str = DEFAULT_RUNBOOK_BASE_URL) -> str:
        return f"{base.rstrip('/')}/{self.name}.md"

    def dashboard_url(self, base: str = DEFAULT_DASHBOARD_BASE_URL) -> str:
        uid = DASHBOARD_UIDS[self.dashboard]
        return (
            f"{base.rstrip('/')}/d/{uid}"
            "?var-site={{ $labels.site }}&var-cluster={{ $labels.cluster }}"
        )


def _num(value: float) -> str:
    """A threshold as PromQL and people write it: 0.1, 100, 1e-6."""
    text = f"{value:g}"
    return text.replace("e-0", "e-").replace("e+0", "e+")


def _states(states: Iterable[str]) -> str:
    return "|".join(states)


# --- recording rules -----------------------------------------------------------------------

_SC = "site, cluster"
_FEC = "site_cluster_instance_device_type:slingshot_fec_codewords:rate5m"
_OST_FILL = "site_cluster_fs_target:lustre_ost_fill:ratio"
_GPU_JOBS = (
    "max by (site, cluster, instance, gpu, uuid, job_id) (gpu_job_info)"
    " * on (site, cluster, instance, gpu, uuid) group_left () gpu_utilization_ratio"
)

RECORDING_RULES: tuple[RecordingRule, ...] = (
    # Slurm: nodes by state, unavailable nodes, utilisation, backlog.
    RecordingRule(
        "slurm",
        "site_cluster_partition_state:slurm_nodes:sum",
        "sum by (site, cluster, partition, state) (slurm_nodes)",
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_nodes:sum",
        "sum by (site, cluster, partition) (slurm_nodes)",
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_nodes_unavailable:sum",
        "sum by (site, cluster, partition) "
        f'(slurm_nodes{{state=~"{_states(SLURM_UNAVAILABLE_STATES)}"}})'
        "\nor\n0 * sum by (site, cluster, partition) (slurm_nodes)",
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_nodes_unavailable:ratio",
        "site_cluster_partition:slurm_nodes_unavailable:sum"
        "\n/\n(site_cluster_partition:slurm_nodes:sum > 0)",
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_partition_cpus_alloc:ratio",
        'sum by (site, cluster, partition) (slurm_partition_cpus{state="alloc"})'
        '\n/\n(sum by (site, cluster, partition) (slurm_partition_cpus{state="total"}) > 0)',
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_partition_gpus_alloc:ratio",
        'sum by (site, cluster, partition) (slurm_partition_gpus{state="alloc"})'
        '\n/\n(sum by (site, cluster, partition) (slurm_partition_gpus{state="total"}) > 0)',
    ),
    RecordingRule(
        "slurm",
        "site_cluster:slurm_node_cpus_alloc:ratio",
        f'sum by ({_SC}) (slurm_node_cpus{{state="alloc"}})'
        f'\n/\n(sum by ({_SC}) (slurm_node_cpus{{state="total"}}) > 0)',
    ),
    RecordingRule(
        "slurm",
        "site_cluster:slurm_node_gpus_alloc:ratio",
        f'sum by ({_SC}) (slurm_node_gpus{{state="alloc"}})'
        f'\n/\n(sum by ({_SC}) (slurm_node_gpus{{state="total"}}) > 0)',
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_jobs_pending_resources:sum",
        'sum by (site, cluster, partition) (slurm_jobs_pending{reason="Resources"})',
    ),
    # GPU: utilisation per job (join on gpu_job_info) and per cluster.
    RecordingRule(
        "gpu",
        "site_cluster_job_id:gpu_utilization_ratio:sum",
        f"sum by (site, cluster, job_id) (\n  {_GPU_JOBS}\n)",
    ),
    RecordingRule(
        "gpu",
        "site_cluster_job_id:gpu_utilization_ratio:count",
        f"count by (site, cluster, job_id) (\n  {_GPU_JOBS}\n)",
    ),
    RecordingRule(
        "gpu",
        "site_cluster_job_id:gpu_utilization_ratio:avg",
        "site_cluster_job_id:gpu_utilization_ratio:sum"
        "\n/\nsite_cluster_job_id:gpu_utilization_ratio:count",
    ),
    RecordingRule(
        "gpu",
        "site_cluster:gpu_utilization_ratio:avg",
        f"avg by ({_SC}) (gpu_utilization_ratio)",
    ),
    # Slingshot: FEC codeword rates, codeword error ratios, BER, retransmission timeouts.
    RecordingRule(
        "slingshot",
        _FEC,
        "sum by (site, cluster, instance, device, type) (rate(slingshot_fec_codewords_total[5m]))",
    ),
    RecordingRule(
        "slingshot",
        "site_cluster_instance_device_type:slingshot_fec_codewords:ratio_rate5m",
        f'{_FEC}{{type=~"corrected|uncorrected"}}'
        "\n/ ignoring (type) group_left ()\n"
        f"(sum by (site, cluster, instance, device) ({_FEC}) > 0)",
    ),
    RecordingRule(
        "slingshot",
        "site_cluster_type:slingshot_fec_codewords:ratio_rate5m",
        f'sum by (site, cluster, type) ({_FEC}{{type=~"corrected|uncorrected"}})'
        "\n/ ignoring (type) group_left ()\n"
        f"(sum by (site, cluster) ({_FEC}) > 0)",
    ),
    RecordingRule(
        "slingshot",
        "site_cluster_instance_device_type:slingshot_fec_ber:ratio_rate5m",
        f'{_FEC}{{type=~"corrected|uncorrected"}}'
        "\n/ ignoring (type) group_left ()\n"
        "(max by (site, cluster, instance, device) (slingshot_link_speed_bits_per_second) > 0)",
    ),
    RecordingRule(
        "slingshot",
        "site_cluster_instance_device_type:slingshot_timeouts:rate5m",
        "sum by (site, cluster, instance, device, type) (rate(slingshot_timeouts_total[5m]))",
    ),
    # Lustre: OST fill (server or client view, deduplicated), spread, metadata operations.
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_ost_capacity_bytes:max",
        'max by (site, cluster, fs, target) (lustre_target_capacity_bytes{component=~"ost|osc"})',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_ost_available_bytes:max",
        'max by (site, cluster, fs, target) (lustre_target_available_bytes{component=~"ost|osc"})',
    ),
    RecordingRule(
        "lustre",
        _OST_FILL,
        "1 - (\n  site_cluster_fs_target:lustre_ost_available_bytes:max"
        "\n  /\n  (site_cluster_fs_target:lustre_ost_capacity_bytes:max > 0)\n)",
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs:lustre_ost_fill:ratio",
        "1 - (\n  sum by (site, cluster, fs) "
        "(site_cluster_fs_target:lustre_ost_available_bytes:max)"
        "\n  /\n  (sum by (site, cluster, fs) "
        "(site_cluster_fs_target:lustre_ost_capacity_bytes:max) > 0)\n)",
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs:lustre_ost_fill:spread",
        f"max by (site, cluster, fs) ({_OST_FILL})\n-\nmin by (site, cluster, fs) ({_OST_FILL})",
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target_operation:lustre_mdt_operations:rate5m",
        "sum by (site, cluster, fs, target, operation) "
        '(rate(lustre_operations_total{component="mdt"}[5m]))',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs:lustre_mdt_operations:rate5m",
        'sum by (site, cluster, fs) (rate(lustre_operations_total{component="mdt"}[5m]))',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:rate5m",
        "sum by (site, cluster, fs, target) "
        '(rate(lustre_operation_latency_seconds_total{component="mdt"}[5m]))',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_mdt_timed_operations:rate5m",
        "sum by (site, cluster, fs, target) (\n"
        '  rate(lustre_operations_total{component="mdt"}[5m])\n'
        '  and lustre_operation_latency_seconds_total{component="mdt"}\n)',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:mean5m",
        "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:rate5m"
        "\n/\n(site_cluster_fs_target:lustre_mdt_timed_operations:rate5m > 0)",
    ),
)


# --- alerting rules ------------------------------------------------------------------------

_XIDS = "|".join(str(xid) for xid in GPU_PAGING_XIDS)
_GPU_KEY = "site, cluster, instance, gpu, uuid"

ALERTS: tuple[AlertRule, ...] = (
    # Gotthard itself.
    AlertRule(
        component="gotthard",
        name="GotthardExporterDown",
        expr='up{job=~"gotthard.*"} == 0',
        for_="5m",
        severity="warning",
        summary="A Gotthard exporter cannot be scraped.",
        description=(
            "Prometheus has not scraped {{ $labels.job }} target {{ $labels.instance }} "
            "({{ $labels.site }}/{{ $labels.cluster }}) for 5 minutes; its alerts cannot fire."
        ),
        dashboard="site-overview",
        expr_summary='`up{job=~"gotthard.*"} == 0`',
    ),
    AlertRule(
        component="gotthard",
        name="GotthardCollectorDown",
        expr="gotthard_collector_up == 0",
        for_="5m",
        severity="warning",
        summary="A Gotthard collector is failing.",
        description=(
            "Collector {{ $labels.collector }} of exporter {{ $labels.instance }} "
            "({{ $labels.site }}/{{ $labels.cluster }}) has failed its polls for 5 minutes; "
            "its metrics are missing."
        ),
        dashboard="site-overview",
        expr_summary="`gotthard_collector_up == 0`",
    ),
    # Slurm.
    AlertRule(
        component="slurm",
        name="SlurmControllerDown",
        expr="slurm_up == 0",
        for_="2m",
        severity="critical",
        summary="The Slurm controller does not answer.",
        description=(
            "slurmctld of cluster {{ $labels.cluster }} at {{ $labels.site }} has not answered "
            "the polls of {{ $labels.instance }} for 2 minutes: no jobs can be submitted or "
            "scheduled."
        ),
        dashboard="slurm-cluster",
        expr_summary="`slurm_up == 0`",
    ),
    AlertRule(
        component="slurm",
        name="SlurmNodesUnavailable",
        expr=(
            "site_cluster_partition:slurm_nodes_unavailable:ratio"
            f" > {_num(SLURM_UNAVAILABLE_RATIO)}"
        ),
        for_="15m",
        severity="warning",
        summary="Many Slurm nodes are down, draining or drained.",
        description=(
            "{{ $value | humanizePercentage }} of the nodes of partition {{ $labels.partition }} "
            "in {{ $labels.site }}/{{ $labels.cluster }} are down, draining, drained or failing."
        ),
        dashboard="slurm-cluster",
        expr_summary=(
            f"share of nodes in {', '.join(SLURM_UNAVAILABLE_STATES)} per partition "
            f"> {SLURM_UNAVAILABLE_RATIO:.0%}"
        ),
    ),
    AlertRule(
        component="slurm",
        name="SlurmPendingResourcesBacklog",
        expr=(
            "site_cluster_partition:slurm_jobs_pending_resources:sum"
            f" > {SLURM_PENDING_RESOURCES_JOBS}"
        ),
        for_="1h",
        severity="warning",
        summary="A large backlog of Slurm jobs is pending for resources.",
        description=(
            "{{ $value | humanize }} jobs of partition {{ $labels.partition }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} have been pending with reason Resources "
            "for over an hour."
        ),
        dashboard="slurm-cluster",
        expr_summary=(
            f"jobs pending with reason `Resources` per partition > {SLURM_PENDING_RESOURCES_JOBS}"
        ),
    ),
    AlertRule(
        component="slurm",
        name="SlurmSchedulerCycleSlow",
        expr=(
            "avg_over_time(slurm_scheduler_cycle_last_seconds[10m])"
            f" > {_num(SLURM_SCHEDULER_CYCLE_SECONDS)}"
        ),
        for_="15m",
        severity="warning",
        summary="The Slurm main scheduler cycle is slow.",
        description=(
            "The main scheduling cycle of {{ $labels.site }}/{{ $labels.cluster }} took "
            "{{ $value | humanizeDuration }} on average over the last 10 minutes."
        ),
        dashboard="slurm-cluster",
        expr_summary=(
            "10-minute average of `slurm_scheduler_cycle_last_seconds` "
            f"> {_num(SLURM_SCHEDULER_CYCLE_SECONDS)} s"
        ),
    ),
    # GPU.
    AlertRule(
        component="gpu",
        name="GPULost",
        expr=(
            'gpu_health{gpu_instance=""} == 0'
            f'\nunless on ({_GPU_KEY})\ngpu_memory_total_bytes{{gpu_instance=""}}'
        ),
        for_="1m",
        severity="critical",
        summary="A GPU has fallen off the bus or been lost by the driver.",
        description=(
            "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} answers GPU_IS_LOST; jobs on it hang or "
            "fail."
        ),
        dashboard="gpu-fleet",
        expr_summary="`gpu_health == 0` and no memory reading (NVML GPU_IS_LOST)",
    ),
    AlertRule(
        component="gpu",
        name="GPUFatalXid",
        expr=(
            f'increase(gpu_xid_errors_total{{xid=~"{_XIDS}"}}[10m]) > 0'
            f'\nor\n(gpu_xid_errors_total{{xid=~"{_XIDS}"}}'
            f' unless gpu_xid_errors_total{{xid=~"{_XIDS}"}} offset 10m)'
        ),
        for_="0s",
        severity="critical",
        summary="A GPU reported a fatal XID error.",
        description=(
            "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} reported XID {{ $labels.xid }} in the "
            "last 10 minutes; the GPU needs a reset or the node a reboot."
        ),
        dashboard="gpu-fleet",
        expr_summary=f"a new XID {', '.join(map(str, GPU_PAGING_XIDS))} within 10 minutes",
    ),
    AlertRule(
        component="gpu",
        name="GPUUnhealthy",
        expr="gpu_health == 0",
        for_="5m",
        severity="warning",
        summary="A GPU is marked unhealthy.",
        description=(
            "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} has been unhealthy (lost, row-remap "
            "failure or a recent fatal XID) for 5 minutes."
        ),
        dashboard="gpu-fleet",
        expr_summary="`gpu_health == 0` (any cause)",
    ),
    AlertRule(
        component="gpu",
        name="GPUUncorrectableECCErrors",
        expr='increase(gpu_ecc_errors_total{type="uncorrected"}[10m]) > 0',
        for_="0s",
        severity="warning",
        summary="A GPU has uncorrectable ECC memory errors.",
        description=(
            "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} counted {{ $value | humanize }} "
            "uncorrectable ECC errors in the last 10 minutes."
        ),
        dashboard="gpu-fleet",
        expr_summary="uncorrected ECC errors increased within 10 minutes",
    ),
    AlertRule(
        component="gpu",
        name="GPURowRemapFailure",
        expr='gpu_remapped_rows{state="failure"} > 0',
        for_="0s",
        severity="critical",
        summary="GPU memory row remapping failed.",
        description=(
            "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} could not remap a failing memory row; "
            "it must be taken out of service."
        ),
        dashboard="gpu-fleet",
        expr_summary='`gpu_remapped_rows{state="failure"} > 0`',
    ),
    AlertRule(
        component="gpu",
        name="GPUThermalThrottling",
        expr=(
            'rate(gpu_throttle_seconds_total{reason="thermal"}[5m])'
            f" > {_num(GPU_THERMAL_THROTTLE_RATIO)}"
        ),
        for_="15m",
        severity="warning",
        summary="A GPU is throttled by temperature.",
        description=(
            "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} has been thermally throttled "
            "{{ $value | humanizePercentage }} of the time for 15 minutes."
        ),
        dashboard="gpu-fleet",
        expr_summary=(
            f"thermal throttling > {GPU_THERMAL_THROTTLE_RATIO:.0%} of the time (5-minute rate)"
        ),
    ),
    AlertRule(
        component="gpu",
        name="GPUPowerThrottling",
        expr=(
            'rate(gpu_throttle_seconds_total{reason="power"}[5m])'
            f" > {_num(GPU_POWER_THROTTLE_RATIO)}"
        ),
        for_="30m",
        severity="info",
        summary="A GPU is held at its power limit.",
        description=(
            "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} has been power-throttled "
            "{{ $value | humanizePercentage }} of the time for 30 minutes."
        ),
        dashboard="gpu-fleet",
        expr_summary=(
            f"power throttling > {GPU_POWER_THROTTLE_RATIO:.0%} of the time (5-minute rate)"
        ),
    ),
    AlertRule(
        component="gpu",
        name="GPUIdleWhileAllocated",
        expr=(
            "max by (site, cluster, instance, gpu, uuid, job_id) (gpu_job_info)"
            f"\n* on ({_GPU_KEY}) group_left ()\n"
            f"(avg_over_time(gpu_utilization_ratio[15m]) < {_num(GPU_IDLE_UTILIZATION)})"
        ),
        for_="45m",
        severity="warning",
        summary="A GPU held by a job is idle.",
        description=(
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} is held by Slurm job {{ $labels.job_id }} "
            "but has averaged {{ $value | humanizePercentage }} utilisation for an hour."
        ),
        dashboard="gpu-fleet",
        expr_summary=(
            f"GPU with a job (`gpu_job_info`) under {GPU_IDLE_UTILIZATION:.0%} utilisation "
            "(15-minute average)"
        ),
    ),
    # Slingshot.
    AlertRule(
        component="slingshot",
        name="SlingshotLinkDown",
        expr="slingshot_link_up == 0",
        for_="5m",
        severity="warning",
        summary="A Slingshot NIC link is down.",
        description=(
            "The link of {{ $labels.device }} on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} has been down for 5 minutes."
        ),
        dashboard="slingshot-network-health",
        expr_summary="`slingshot_link_up == 0`",
    ),
    AlertRule(
        component="slingshot",
        name="SlingshotLinkFlapping",
        expr=(
            f'slingshot_link_restarts_recent{{window="1h"}} >= {SLINGSHOT_FLAPS_1H}'
            f'\nor\nslingshot_link_restarts_recent{{window="10h"}} >= {SLINGSHOT_FLAPS_10H}'
        ),
        for_="0s",
        severity="warning",
        summary="A Slingshot link is flapping.",
        description=(
            "The link of {{ $labels.device }} on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} restarted {{ $value | humanize }} times "
            "in the last {{ $labels.window }}."
        ),
        dashboard="slingshot-network-health",
        expr_summary=(
            f">= {SLINGSHOT_FLAPS_1H} link restarts in 1 h or >= {SLINGSHOT_FLAPS_10H} in 10 h "
            "(cxi_healthcheck)"
        ),
    ),
    AlertRule(
        component="slingshot",
        name="SlingshotUncorrectedFECErrors",
        expr=f'{_FEC}{{type="uncorrected"}} > 0',
        for_="10m",
        severity="warning",
        summary="A Slingshot link has uncorrectable FEC codewords.",
        description=(
            "{{ $labels.device }} on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} has received "
            "{{ $value | humanize }} uncorrectable FEC codewords per second for 10 minutes."
        ),
        dashboard="slingshot-network-health",
        expr_summary="uncorrected FEC codewords on every evaluation for 10 minutes",
    ),
    AlertRule(
        component="slingshot",
        name="SlingshotHighBER",
        expr=(
            "site_cluster_instance_device_type:slingshot_fec_ber:ratio_rate5m"
            f'{{type="corrected"}} > {_num(SLINGSHOT_CORRECTED_BER)}'
        ),
        for_="30m",
        severity="warning",
        summary="A Slingshot link has a high corrected bit error rate.",
        description=(
            "{{ $labels.device }} on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} has a corrected BER of "
            "{{ $value | humanize }} (threshold "
            f"{_num(SLINGSHOT_CORRECTED_BER)}); the cable or optic is degrading."
        ),
        dashboard="slingshot-network-health",
        expr_summary=f"corrected-codeword BER (cxi_stat style) > {_num(SLINGSHOT_CORRECTED_BER)}",
    ),
    AlertRule(
        component="slingshot",
        name="SlingshotRetransmissionTimeoutsHigh",
        expr=(
            "site_cluster_instance_device_type:slingshot_timeouts:rate5m"
            f'{{type="spt"}} > {_num(SLINGSHOT_SPT_TIMEOUTS_PER_SECOND)}'
        ),
        for_="15m",
        severity="warning",
        summary="Slingshot retransmission timeouts are rising.",
        description=(
            "{{ $labels.device }} on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} has {{ $value | humanize }} packet "
            "retransmission (SPT) timeouts per second."
        ),
        dashboard="slingshot-network-health",
        expr_summary=f"SPT timeouts > {_num(SLINGSHOT_SPT_TIMEOUTS_PER_SECOND)}/s (5-minute rate)",
    ),
    # Lustre.
    AlertRule(
        component="lustre",
        name="LustreOSTFillHigh",
        expr=f"{_OST_FILL} > {_num(LUSTRE_OST_FILL_WARNING)}",
        for_="30m",
        severity="warning",
        summary="A Lustre OST is more than 85% full.",
        description=(
            "OST {{ $labels.target }} of {{ $labels.fs }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} is {{ $value | humanizePercentage }} full."
        ),
        dashboard="lustre-storage",
        expr_summary=f"OST used fraction > {LUSTRE_OST_FILL_WARNING:.0%}",
    ),
    AlertRule(
        component="lustre",
        name="LustreOSTFillCritical",
        expr=f"{_OST_FILL} > {_num(LUSTRE_OST_FILL_CRITICAL)}",
        for_="10m",
        severity="critical",
        summary="A Lustre OST is more than 90% full.",
        description=(
            "OST {{ $labels.target }} of {{ $labels.fs }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} is {{ $value | humanizePercentage }} "
            "full; writes will soon fail with ENOSPC."
        ),
        dashboard="lustre-storage",
        expr_summary=f"OST used fraction > {LUSTRE_OST_FILL_CRITICAL:.0%}",
    ),
    AlertRule(
        component="lustre",
        name="LustreOSTImbalance",
        expr=f"site_cluster_fs:lustre_ost_fill:spread > {_num(LUSTRE_OST_FILL_SPREAD)}",
        for_="1h",
        severity="warning",
        summary="Lustre OSTs are unevenly filled.",
        description=(
            "The fullest and the emptiest OST of {{ $labels.fs }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} differ by "
            "{{ $value | humanizePercentage }} of their capacity."
        ),
        dashboard="lustre-storage",
        expr_summary=(
            f"max - min OST used fraction per file system > {_num(LUSTRE_OST_FILL_SPREAD)}"
        ),
    ),
    AlertRule(
        component="lustre",
        name="LustreMetadataLatencyHigh",
        expr=(
            "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:mean5m"
            f" > {_num(LUSTRE_MDT_LATENCY_SECONDS)}"
        ),
        for_="15m",
        severity="warning",
        summary="Lustre metadata operations are slow.",
        description=(
            "Metadata operations on {{ $labels.target }} of {{ $labels.fs }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} take {{ $value | humanizeDuration }} on "
            "average."
        ),
        dashboard="lustre-storage",
        expr_summary=f"mean MDT operation latency > {LUSTRE_MDT_LATENCY_SECONDS * 1000:g} ms",
    ),
    # DR.
    AlertRule(
        component="dr",
        name="DRBackupTooOld",
        expr=(
            "time() - gotthard_dr_backup_last_success_timestamp_seconds"
            f" > {DR_BACKUP_MAX_AGE_SECONDS}"
        ),
        for_="15m",
        severity="warning",
        summary="The last successful backup is too old.",
        description=(
            "The last Completed backup of schedule {{ $labels.schedule }} at "
            "{{ $labels.site }} is {{ $value | humanizeDuration }} old."
        ),
        dashboard="dr",
        expr_summary=f"last Completed backup older than {DR_BACKUP_MAX_AGE_SECONDS // 3600} h",
    ),
    AlertRule(
        component="dr",
        name="DRDrillFailed",
        expr="gotthard_dr_drill_last_success == 0",
        for_="5m",
        severity="warning",
        summary="The last DR drill failed.",
        description=(
            "The last restore drill of namespace {{ $labels.namespace }} at "
            "{{ $labels.site }} did not verify; restores from its backups are unproven."
        ),
        dashboard="dr",
        expr_summary="`gotthard_dr_drill_last_success == 0`",
    ),
    AlertRule(
        component="dr",
        name="DRRTOOverTarget",
        expr=f"gotthard_dr_drill_rto_seconds > {DR_RTO_TARGET_SECONDS}",
        for_="5m",
        severity="warning",
        summary="The measured recovery time exceeds the RTO target.",
        description=(
            "The last drill of namespace {{ $labels.namespace }} at {{ $labels.site }} took "
            "{{ $value | humanizeDuration }} to restore and verify (target "
            f"{DR_RTO_TARGET_SECONDS // 60} minutes)."
        ),
        dashboard="dr",
        expr_summary=f"drill RTO > {DR_RTO_TARGET_SECONDS // 60} minutes",
    ),
    AlertRule(
        component="dr",
        name="DRSiteUnhealthy",
        expr="gotthard_dr_site_healthy == 0",
        for_="5m",
        severity="critical",
        summary="The DR placement controller judges a site unhealthy.",
        description=(
            "The placement controller has judged site {{ $labels.site }} unhealthy for "
            "5 minutes; services may fail over to the other site."
        ),
        dashboard="dr",
        expr_summary="`gotthard_dr_site_healthy == 0`",
    ),
    # Security.
    AlertRule(
        component="security",
        name="SecurityKubeBenchCheckFailed",
        expr="gotthard_kube_bench_check_failed > 0",
        for_="15m",
        severity="warning",
        summary="A required CIS kube-bench check fails.",
        description=(
            "kube-bench check {{ $labels.id }} ({{ $labels.node_type }}) fails in "
            "{{ $labels.site }}/{{ $labels.cluster }} and is not waived."
        ),
        dashboard="security-compliance",
        expr_summary="`gotthard_kube_bench_check_failed > 0` (not waived)",
    ),
    AlertRule(
        component="security",
        name="SecurityPolicyViolations",
        expr="gotthard_policy_violations > 0",
        for_="15m",
        severity="warning",
        summary="Live objects violate the security policies.",
        description=(
            "{{ $value | humanize }} live objects in {{ $labels.site }}/{{ $labels.cluster }} "
            "violate rule {{ $labels.rule }} of policy {{ $labels.policy }}."
        ),
        dashboard="security-compliance",
        expr_summary="`gotthard_policy_violations > 0`",
    ),
)


def alert_names() -> list[str]:
    return [alert.name for alert in ALERTS]


def alert(name: str) -> AlertRule:
    for candidate in ALERTS:
        if candidate.name == name:
            return candidate
    raise KeyError(name)


# --- rendering ----------------------------------------------------------------------------

HEADER = "# Generated by `gotthard rules build` from gotthard/dashboards/rules.py; do not edit.\n"


class _Dumper(yaml.SafeDumper):
    """Block style, indented sequences, multi-line strings as literal blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


def dump_yaml(document: Any) -> str:
    """Deterministic YAML: insertion order, block style, no line folding."""
    return yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1_000_000,
    )


def _by_component(
    items: Sequence[RecordingRule] | Sequence[AlertRule],
) -> list[tuple[str, list[Any]]]:
    grouped: list[tuple[str, list[Any]]] = []
    for component in COMPONENTS:
        members = [item for item in items if item.component == component]
        if members:
            grouped.append((component, members))
    return grouped


def recording_groups() -> dict[str, Any]:
    return {
        "groups": [
            {
                "name": group_name(component, "recording"),
                "rules": [{"record": rule.record, "expr": rule.expr} for rule in rules],
            }
            for component, rules in _by_component(RECORDING_RULES)
        ]
    }


def alerting_groups(
    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL,
    dashboard_base_url: str = DEFAULT_DASHBOARD_BASE_URL,
) -> dict[str, Any]:
    groups = []
    for component, alerts in _by_component(ALERTS):
        rules = []
        for rule in alerts:
            entry: dict[str, Any] = {"alert": rule.name, "expr": rule.promql}
            if rule.for_ not in ("0s", "0m", "0"):
                entry["for"] = rule.for_
            entry["labels"] = {"severity": rule.severity}
            entry["annotations"] = {
                "summary": rule.summary,
                "description": rule.description,
                "runbook_url": rule.runbook_url(runbook_base_url),
                "dashboard_url": rule.dashboard_url(dashboard_base_url),
            }
            rules.append(entry)
        groups.append({"name": group_name(component, "alerts"), "rules": rules})
    return {"groups": groups}


def render_recording_rules() -> str:
    return HEADER + dump_yaml(recording_groups())


def render_alerting_rules(
    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL,
    dashboard_base_url: str = DEFAULT_DASHBOARD_BASE_URL,
) -> str:
    return HEADER + dump_yaml(alerting_groups(runbook_base_url, dashboard_base_url))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def recording_rules_markdown_table() -> str:
    """The recording-rule table of docs/alerts.md."""
    lines = ["| Record | Expression |", "|---|---|"]
    for rule in RECORDING_RULES:
        lines.append(f"| `{rule.record}` | `{_cell(rule.expr)}` |")
    return "\n".join(lines) + "\n"


def alerts_markdown_table() -> str:
    """The index table of docs/alerts.md (a test keeps the page in step with this)."""
    lines = [
        "| Alert | Severity | Expression | For | Runbook |",
        "|---|---|---|---|---|",
    ]
    for rule in ALERTS:
        lines.append(
            f"| {rule.name} | {rule.severity} | {_cell(rule.expr_summary)} | {rule.for_} "
            f"| [runbooks/{rule.name}.md](runbooks/{rule.name}.md) |"
        )
    return "\n".join(lines) + "\n"
