"""Prometheus alerting rules, one section per component.

Named CamelCase with a component prefix; see :mod:`gotthard.dashboards.rules`.
"""

from __future__ import annotations

from functools import partial

from gotthard.dashboards.recording_rules import FEC_RATE, LNET_DROPS, LUSTRE_EVICTIONS, OST_FILL
from gotthard.dashboards.rule_model import AlertRule, Severity, num
from gotthard.dashboards.thresholds import (
    DR_BACKUP_MAX_AGE_SECONDS,
    DR_RTO_TARGET_SECONDS,
    GPU_IDLE_UTILIZATION,
    GPU_PAGING_XIDS,
    GPU_POWER_THROTTLE_RATIO,
    GPU_THERMAL_THROTTLE_RATIO,
    LUSTRE_EVICTIONS_10M,
    LUSTRE_LNET_DROPS_PER_SECOND,
    LUSTRE_MDT_LATENCY_SECONDS,
    LUSTRE_OST_FILL_CRITICAL,
    LUSTRE_OST_FILL_SPREAD,
    LUSTRE_OST_FILL_WARNING,
    LUSTRE_RECOVERY_STUCK_FOR,
    SLINGSHOT_CORRECTED_BER,
    SLINGSHOT_FLAPS_1H,
    SLINGSHOT_FLAPS_10H,
    SLINGSHOT_SPT_TIMEOUTS_PER_SECOND,
    SLURM_PENDING_RESOURCES_JOBS,
    SLURM_SCHEDULER_CYCLE_SECONDS,
    SLURM_UNAVAILABLE_RATIO,
    SLURM_UNAVAILABLE_STATES,
)

#: Where an alert fires: every series carries the site and cluster target labels.
_AT = "{{ $labels.site }}/{{ $labels.cluster }}"
#: The subjects descriptions start from: a host, a GPU, a Slingshot NIC, a Lustre file
#: system and one of its targets.
_HOST = "{{ $labels.instance }} in " + _AT
_GPU = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on " + _HOST
_LINK = "{{ $labels.device }} on " + _HOST
_FS = "{{ $labels.fs }} in " + _AT
_TARGET = "{{ $labels.target }} of " + _FS

_XIDS = "|".join(str(xid) for xid in GPU_PAGING_XIDS)
_GPU_KEY = "site, cluster, instance, gpu, uuid"

#: One constructor per component: its alerts link to the component's dashboard.
_gotthard = partial(AlertRule, component="gotthard", dashboard="site-overview")
_slurm = partial(AlertRule, component="slurm", dashboard="slurm-cluster")
_gpu = partial(AlertRule, component="gpu", dashboard="gpu-fleet")
_slingshot = partial(AlertRule, component="slingshot", dashboard="slingshot-network-health")
_lustre = partial(AlertRule, component="lustre", dashboard="lustre-storage")
_dr = partial(AlertRule, component="dr", dashboard="dr")
_security = partial(AlertRule, component="security", dashboard="security-compliance")


#: How GPU throttling reads in a description and a summary, by NVML reason.
_THROTTLING = {
    "thermal": ("thermally throttled", "A GPU is throttled by temperature."),
    "power": ("power-throttled", "A GPU is held at its power limit."),
}


def _gpu_throttling(reason: str, ratio: float, for_: str, severity: Severity) -> AlertRule:
    """A GPU whose clocks *reason* held back more than *ratio* of the time for *for_*."""
    state, summary = _THROTTLING[reason]
    minutes = for_.removesuffix("m")
    return _gpu(
        name=f"GPU{reason.capitalize()}Throttling",
        expr=f'rate(gpu_throttle_seconds_total{{reason="{reason}"}}[5m]) > {num(ratio)}',
        for_=for_,
        severity=severity,
        summary=summary,
        description=_GPU
        + f" has been {state} "
        + "{{ $value | humanizePercentage }}"
        + f" of the time for {minutes} minutes.",
        expr_summary=f"{reason} throttling > {ratio:.0%} of the time (5-minute rate)",
    )


def _ost_fill(
    name: str, threshold: float, for_: str, severity: Severity, consequence: str = ""
) -> AlertRule:
    """An OST fuller than *threshold*; *consequence* ends the description."""
    return _lustre(
        name=name,
        expr=f"{OST_FILL} > {num(threshold)}",
        for_=for_,
        severity=severity,
        summary=f"A Lustre OST is more than {threshold:.0%} full.",
        description="OST "
        + _TARGET
        + " is {{ $value | humanizePercentage }} full"
        + consequence
        + ".",
        expr_summary=f"OST used fraction > {threshold:.0%}",
    )


ALERTS: tuple[AlertRule, ...] = (
    # Gotthard itself.
    _gotthard(
        name="GotthardExporterDown",
        expr='up{job=~"gotthard.*"} == 0',
        for_="5m",
        severity="warning",
        summary="A Gotthard exporter cannot be scraped.",
        description=(
            "Prometheus has not scraped {{ $labels.job }} target {{ $labels.instance }} "
            "({{ $labels.site }}/{{ $labels.cluster }}) for 5 minutes; its alerts cannot fire."
        ),
        expr_summary='`up{job=~"gotthard.*"} == 0`',
    ),
    _gotthard(
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
        expr_summary="`gotthard_collector_up == 0`",
    ),
    # Slurm.
    _slurm(
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
        expr_summary="`slurm_up == 0`",
    ),
    _slurm(
        name="SlurmNodesUnavailable",
        expr=(
            f"site_cluster_partition:slurm_nodes_unavailable:ratio > {num(SLURM_UNAVAILABLE_RATIO)}"
        ),
        for_="15m",
        severity="warning",
        summary="Many Slurm nodes are down, draining or drained.",
        description=(
            "{{ $value | humanizePercentage }} of the nodes of partition {{ $labels.partition }} "
            "in {{ $labels.site }}/{{ $labels.cluster }} are down, draining, drained or failing."
        ),
        expr_summary=(
            f"share of nodes in {', '.join(SLURM_UNAVAILABLE_STATES)} per partition "
            f"> {SLURM_UNAVAILABLE_RATIO:.0%}"
        ),
    ),
    _slurm(
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
        expr_summary=(
            f"jobs pending with reason `Resources` per partition > {SLURM_PENDING_RESOURCES_JOBS}"
        ),
    ),
    _slurm(
        name="SlurmSchedulerCycleSlow",
        expr=(
            "avg_over_time(slurm_scheduler_cycle_last_seconds[10m])"
            f" > {num(SLURM_SCHEDULER_CYCLE_SECONDS)}"
        ),
        for_="15m",
        severity="warning",
        summary="The Slurm main scheduler cycle is slow.",
        description=(
            "The main scheduling cycle of {{ $labels.site }}/{{ $labels.cluster }} took "
            "{{ $value | humanizeDuration }} on average over the last 10 minutes."
        ),
        expr_summary=(
            "10-minute average of `slurm_scheduler_cycle_last_seconds` "
            f"> {num(SLURM_SCHEDULER_CYCLE_SECONDS)} s"
        ),
    ),
    # GPU.
    _gpu(
        name="GPULost",
        expr=(
            'gpu_health{gpu_instance=""} == 0'
            f'\nunless on ({_GPU_KEY})\ngpu_memory_total_bytes{{gpu_instance=""}}'
        ),
        for_="1m",
        severity="critical",
        summary="A GPU has fallen off the bus or been lost by the driver.",
        description=_GPU + " answers GPU_IS_LOST; jobs on it hang or fail.",
        expr_summary="`gpu_health == 0` and no memory reading (NVML GPU_IS_LOST)",
    ),
    _gpu(
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
            _GPU + " reported XID {{ $labels.xid }} in the "
            "last 10 minutes; the GPU needs a reset or the node a reboot."
        ),
        expr_summary=f"a new XID {', '.join(map(str, GPU_PAGING_XIDS))} within 10 minutes",
    ),
    _gpu(
        name="GPUUnhealthy",
        expr="gpu_health == 0",
        for_="5m",
        severity="warning",
        summary="A GPU is marked unhealthy.",
        description=(
            _GPU + " has been unhealthy (lost, row-remap "
            "failure or a recent fatal XID) for 5 minutes."
        ),
        expr_summary="`gpu_health == 0` (any cause)",
    ),
    _gpu(
        name="GPUUncorrectableECCErrors",
        expr='increase(gpu_ecc_errors_total{type="uncorrected"}[10m]) > 0',
        for_="0s",
        severity="warning",
        summary="A GPU has uncorrectable ECC memory errors.",
        description=(
            _GPU + " counted {{ $value | humanize }} "
            "uncorrectable ECC errors in the last 10 minutes."
        ),
        expr_summary="uncorrected ECC errors increased within 10 minutes",
    ),
    _gpu(
        name="GPURowRemapFailure",
        expr='gpu_remapped_rows{state="failure"} > 0',
        for_="0s",
        severity="critical",
        summary="GPU memory row remapping failed.",
        description=(
            _GPU + " could not remap a failing memory row; it must be taken out of service."
        ),
        expr_summary='`gpu_remapped_rows{state="failure"} > 0`',
    ),
    _gpu_throttling("thermal", GPU_THERMAL_THROTTLE_RATIO, "15m", "warning"),
    _gpu_throttling("power", GPU_POWER_THROTTLE_RATIO, "30m", "info"),
    _gpu(
        name="GPUIdleWhileAllocated",
        expr=(
            "max by (site, cluster, instance, gpu, uuid, job_id) (gpu_job_info)"
            f"\n* on ({_GPU_KEY}) group_left ()\n"
            f"(avg_over_time(gpu_utilization_ratio[15m]) < {num(GPU_IDLE_UTILIZATION)})"
        ),
        for_="45m",
        severity="warning",
        summary="A GPU held by a job is idle.",
        description=(
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} in "
            "{{ $labels.site }}/{{ $labels.cluster }} is held by Slurm job {{ $labels.job_id }} "
            "but has averaged {{ $value | humanizePercentage }} utilisation for an hour."
        ),
        expr_summary=(
            f"GPU with a job (`gpu_job_info`) under {GPU_IDLE_UTILIZATION:.0%} utilisation "
            "(15-minute average)"
        ),
    ),
    # Slingshot.
    _slingshot(
        name="SlingshotLinkDown",
        expr="slingshot_link_up == 0",
        for_="5m",
        severity="warning",
        summary="A Slingshot NIC link is down.",
        description="The link of " + _LINK + " has been down for 5 minutes.",
        expr_summary="`slingshot_link_up == 0`",
    ),
    _slingshot(
        name="SlingshotLinkFlapping",
        expr=(
            f'slingshot_link_restarts_recent{{window="1h"}} >= {SLINGSHOT_FLAPS_1H}'
            f'\nor\nslingshot_link_restarts_recent{{window="10h"}} >= {SLINGSHOT_FLAPS_10H}'
        ),
        for_="0s",
        severity="warning",
        summary="A Slingshot link is flapping.",
        description=(
            "The link of " + _LINK + " restarted {{ $value | humanize }} times "
            "in the last {{ $labels.window }}."
        ),
        expr_summary=(
            f">= {SLINGSHOT_FLAPS_1H} link restarts in 1 h or >= {SLINGSHOT_FLAPS_10H} in 10 h "
            "(cxi_healthcheck)"
        ),
    ),
    _slingshot(
        name="SlingshotUncorrectedFECErrors",
        expr=f'{FEC_RATE}{{type="uncorrected"}} > 0',
        for_="10m",
        severity="warning",
        summary="A Slingshot link has uncorrectable FEC codewords.",
        description=(
            _LINK + " has received "
            "{{ $value | humanize }} uncorrectable FEC codewords per second for 10 minutes."
        ),
        expr_summary="uncorrected FEC codewords on every evaluation for 10 minutes",
    ),
    _slingshot(
        name="SlingshotHighBER",
        expr=(
            "site_cluster_instance_device_type:slingshot_fec_ber:ratio_rate5m"
            f'{{type="corrected"}} > {num(SLINGSHOT_CORRECTED_BER)}'
        ),
        for_="30m",
        severity="warning",
        summary="A Slingshot link has a high corrected bit error rate.",
        description=(
            _LINK + " has a corrected BER of "
            "{{ $value | humanize }} (threshold "
            f"{num(SLINGSHOT_CORRECTED_BER)}); the cable or optic is degrading."
        ),
        expr_summary=f"corrected-codeword BER (cxi_stat style) > {num(SLINGSHOT_CORRECTED_BER)}",
    ),
    _slingshot(
        name="SlingshotRetransmissionTimeoutsHigh",
        expr=(
            "site_cluster_instance_device_type:slingshot_timeouts:rate5m"
            f'{{type="spt"}} > {num(SLINGSHOT_SPT_TIMEOUTS_PER_SECOND)}'
        ),
        for_="15m",
        severity="warning",
        summary="Slingshot retransmission timeouts are rising.",
        description=(
            _LINK + " has {{ $value | humanize }} packet retransmission (SPT) timeouts per second."
        ),
        expr_summary=f"SPT timeouts > {num(SLINGSHOT_SPT_TIMEOUTS_PER_SECOND)}/s (5-minute rate)",
    ),
    # Lustre.
    _ost_fill("LustreOSTFillHigh", LUSTRE_OST_FILL_WARNING, "30m", "warning"),
    _ost_fill(
        "LustreOSTFillCritical",
        LUSTRE_OST_FILL_CRITICAL,
        "10m",
        "critical",
        consequence="; writes will soon fail with ENOSPC",
    ),
    _lustre(
        name="LustreOSTImbalance",
        expr=f"site_cluster_fs:lustre_ost_fill:spread > {num(LUSTRE_OST_FILL_SPREAD)}",
        for_="1h",
        severity="warning",
        summary="Lustre OSTs are unevenly filled.",
        description="The fullest and the emptiest OST of "
        + _FS
        + " differ by {{ $value | humanizePercentage }} of their capacity.",
        expr_summary=(
            f"max - min OST used fraction per file system > {num(LUSTRE_OST_FILL_SPREAD)}"
        ),
    ),
    _lustre(
        name="LustreMetadataLatencyHigh",
        expr=(
            "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:mean5m"
            f" > {num(LUSTRE_MDT_LATENCY_SECONDS)}"
        ),
        for_="15m",
        severity="warning",
        summary="Lustre metadata operations are slow.",
        description="Metadata operations on "
        + _TARGET
        + " take {{ $value | humanizeDuration }} on average.",
        expr_summary=f"mean MDT operation latency > {LUSTRE_MDT_LATENCY_SECONDS * 1000:g} ms",
    ),
    _lustre(
        name="LustreHealthCheckFailed",
        expr='lustre_health_check{state!="healthy"} == 1',
        for_="5m",
        severity="critical",
        summary="A Lustre server or client reports itself unhealthy.",
        description="health_check of "
        + _HOST
        + " has read {{ $labels.state }} (not healthy) for 5 minutes.",
        expr_summary="health_check is `NOT HEALTHY` or `LBUG`",
    ),
    _lustre(
        name="LustreRecoveryStuck",
        expr='lustre_target_recovery_status{status=~"recovering|waiting"} == 1',
        for_=LUSTRE_RECOVERY_STUCK_FOR,
        severity="critical",
        summary="A Lustre target has been in recovery for too long.",
        description="{{ $labels.target }} of {{ $labels.fs }} on "
        + _HOST
        + f" has been in recovery for {LUSTRE_RECOVERY_STUCK_FOR.removesuffix('m')} minutes;"
        " IO to it is blocked.",
        expr_summary=f"recovery_status RECOVERING or WAITING for {LUSTRE_RECOVERY_STUCK_FOR}",
    ),
    _lustre(
        name="LustreEvictionStorm",
        expr=f"{LUSTRE_EVICTIONS} > {num(LUSTRE_EVICTIONS_10M)}",
        for_="2m",
        severity="warning",
        summary="A Lustre target is evicting many clients.",
        description=_TARGET + " evicted {{ $value | humanize }} clients in the last 10 minutes.",
        expr_summary=f"more than {LUSTRE_EVICTIONS_10M} evictions from one target in 10 minutes",
    ),
    _lustre(
        name="LustreLNetDrops",
        expr=f"{LNET_DROPS} > {num(LUSTRE_LNET_DROPS_PER_SECOND)}",
        for_="15m",
        severity="warning",
        summary="LNet is dropping messages.",
        description="LNet on " + _HOST + " drops {{ $value | humanize }} messages per second.",
        expr_summary=f"LNet drops > {num(LUSTRE_LNET_DROPS_PER_SECOND)}/s (5-minute rate)",
    ),
    # DR.
    _dr(
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
        expr_summary=f"last Completed backup older than {DR_BACKUP_MAX_AGE_SECONDS // 3600} h",
    ),
    _dr(
        name="DRDrillFailed",
        expr="gotthard_dr_drill_last_success == 0",
        for_="5m",
        severity="warning",
        summary="The last DR drill failed.",
        description=(
            "The last restore drill of namespace {{ $labels.namespace }} at "
            "{{ $labels.site }} did not verify; restores from its backups are unproven."
        ),
        expr_summary="`gotthard_dr_drill_last_success == 0`",
    ),
    _dr(
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
        expr_summary=f"drill RTO > {DR_RTO_TARGET_SECONDS // 60} minutes",
    ),
    _dr(
        name="DRSiteUnhealthy",
        expr="gotthard_dr_site_healthy == 0",
        for_="5m",
        severity="critical",
        summary="The DR placement controller judges a site unhealthy.",
        description=(
            "The placement controller has judged site {{ $labels.site }} unhealthy for "
            "5 minutes; services may fail over to the other site."
        ),
        expr_summary="`gotthard_dr_site_healthy == 0`",
    ),
    # Security.
    _security(
        name="SecurityKubeBenchCheckFailed",
        expr="gotthard_kube_bench_check_failed > 0",
        for_="15m",
        severity="warning",
        summary="A required CIS kube-bench check fails.",
        description=(
            "kube-bench check {{ $labels.id }} ({{ $labels.node_type }}) fails in "
            "{{ $labels.site }}/{{ $labels.cluster }} and is not waived."
        ),
        expr_summary="`gotthard_kube_bench_check_failed > 0` (not waived)",
    ),
    _security(
        name="SecurityPolicyViolations",
        expr="gotthard_policy_violations > 0",
        for_="15m",
        severity="warning",
        summary="Live objects violate the security policies.",
        description=(
            "{{ $value | humanize }} live objects in {{ $labels.site }}/{{ $labels.cluster }} "
            "violate rule {{ $labels.rule }} of policy {{ $labels.policy }}."
        ),
        expr_summary="`gotthard_policy_violations > 0`",
    ),
)
