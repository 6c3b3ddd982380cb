"""Lustre: OST fill and balance, metadata latency, health, recovery, evictions, LNet."""

from __future__ import annotations

from functools import partial

from gotthard.monitoring.rule_model import (
    FS,
    HOST,
    TARGET,
    AlertRule,
    RecordingRule,
    Severity,
    above,
)
from gotthard.monitoring.thresholds import (
    ThresholdValues,
    count,
    duration,
    lasting,
    num,
    pct,
    per_second,
    ratio,
    seconds,
)

COMPONENT = "lustre"
DASHBOARD = "lustre-storage"

OST_FILL_WARNING = ratio("lustre_ost_fill_warning", 0.85, "OST used fraction that opens a ticket")
OST_FILL_CRITICAL = ratio("lustre_ost_fill_critical", 0.90, "OST used fraction that pages")
FULL_WITHIN = seconds(
    "lustre_ost_full_within_seconds", 24 * 3600, "time to full (fill trend) that opens a ticket"
)
PREDICT_MIN_FILL = ratio(
    "lustre_ost_predict_min_fill", 0.60, "OST used fraction from which a fill trend counts"
)
INODE_FILL = ratio("lustre_inode_fill", 0.90, "used fraction of a target's inodes that pages")
OST_FILL_SPREAD = ratio("lustre_ost_fill_spread", 0.20, "fullest minus emptiest OST")
MDT_LATENCY_SECONDS = seconds("lustre_mdt_latency_seconds", 0.05, "mean MDT operation latency")
# the default hard recovery window of 2.12+ is 900 s; sites raise it for big client
# counts, rarely past 30 minutes
RECOVERY_STUCK_FOR = lasting(
    "lustre_recovery_stuck_for", 1800, "recovery time after which it is stuck"
)
EVICTIONS_10M = count("lustre_evictions_10m", 10, "clients evicted from one target in 10 minutes")
LNET_DROPS_PER_SECOND = per_second("lustre_lnet_drops_per_second", 1.0, "LNet drops/s on one node")

CAPACITY = "site_cluster_fs_target:lustre_ost_capacity_bytes:max"
AVAILABLE = "site_cluster_fs_target:lustre_ost_available_bytes:max"
OST_FILL = "site_cluster_fs_target:lustre_ost_fill:ratio"
FS_FILL = "site_cluster_fs:lustre_ost_fill:ratio"
FILL_SPREAD = "site_cluster_fs:lustre_ost_fill:spread"
MDT_OPERATIONS = "site_cluster_fs_target_operation:lustre_mdt_operations:rate5m"
FS_MDT_OPERATIONS = "site_cluster_fs:lustre_mdt_operations:rate5m"
MDT_LATENCY = "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:mean5m"
EVICTIONS = "site_cluster_fs_target:lustre_evictions:increase10m"
LNET_DROPS = "site_cluster_instance:lustre_lnet_drops:rate5m"
INODES_USED = "site_cluster_fs_target:lustre_target_files_used:ratio"
_MDT_RATE = 'rate(lustre_operations_total{component="mdt"}[5m])'


def _ost_max(record: str, metric: str) -> RecordingRule:
    """One value per OST: the same OST is reported by its OSS and by every client's osc."""
    return RecordingRule(
        COMPONENT, record, f'max by (site, cluster, fs, target) ({metric}{{component=~"ost|osc"}})'
    )


RECORDING_RULES = (
    _ost_max(CAPACITY, "lustre_target_capacity_bytes"),
    _ost_max(AVAILABLE, "lustre_target_available_bytes"),
    RecordingRule(COMPONENT, OST_FILL, f"1 - (\n  {AVAILABLE}\n  /\n  ({CAPACITY} > 0)\n)"),
    RecordingRule(
        COMPONENT,
        FS_FILL,
        f"1 - (\n  sum by (site, cluster, fs) ({AVAILABLE})"
        f"\n  /\n  (sum by (site, cluster, fs) ({CAPACITY}) > 0)\n)",
    ),
    RecordingRule(
        COMPONENT,
        FILL_SPREAD,
        f"max by (site, cluster, fs) ({OST_FILL})\n-\nmin by (site, cluster, fs) ({OST_FILL})",
    ),
    RecordingRule(
        COMPONENT, MDT_OPERATIONS, f"sum by (site, cluster, fs, target, operation) ({_MDT_RATE})"
    ),
    RecordingRule(COMPONENT, FS_MDT_OPERATIONS, f"sum by (site, cluster, fs) ({_MDT_RATE})"),
    RecordingRule(
        COMPONENT,
        "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:rate5m",
        "sum by (site, cluster, fs, target) "
        '(rate(lustre_operation_latency_seconds_total{component="mdt"}[5m]))',
    ),
    RecordingRule(
        COMPONENT,
        "site_cluster_fs_target:lustre_mdt_timed_operations:rate5m",
        "sum by (site, cluster, fs, target) (\n"
        f"  {_MDT_RATE}\n"
        '  and lustre_operation_latency_seconds_total{component="mdt"}\n)',
    ),
    RecordingRule(
        COMPONENT,
        MDT_LATENCY,
        "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:rate5m"
        "\n/\n(site_cluster_fs_target:lustre_mdt_timed_operations:rate5m > 0)",
    ),
    RecordingRule(
        COMPONENT,
        EVICTIONS,
        "sum by (site, cluster, fs, target) (increase(lustre_target_evictions_total[10m]))",
    ),
    # Inodes of a target (objects on an OST, files on an MDT), as its server or any
    # client reports them.
    RecordingRule(
        COMPONENT,
        INODES_USED,
        '1 - (\n  max by (site, cluster, fs, target) (lustre_target_files{state="free"})'
        '\n  /\n  (max by (site, cluster, fs, target) (lustre_target_files{state="total"}) > 0)\n)',
    ),
    RecordingRule(
        COMPONENT,
        LNET_DROPS,
        "sum by (site, cluster, instance) (rate(lustre_lnet_drop_count_total[5m]))",
    ),
)

_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD)
_above = partial(above, _alert)


def _ost_fill(
    name: str, threshold: float, for_: str, severity: Severity, consequence: str = ""
) -> AlertRule:
    """An OST fuller than *threshold*; *consequence* ends the description."""
    return _above(
        name,
        OST_FILL,
        threshold,
        for_,
        severity,
        f"A Lustre OST is more than {pct(threshold)} full.",
        "OST " + TARGET + " is {{ $value | humanizePercentage }} full" + consequence + ".",
        f"OST used fraction > {pct(threshold)}",
    )


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    spread, latency = t[OST_FILL_SPREAD], t[MDT_LATENCY_SECONDS]
    stuck, evictions, drops = (
        duration(t[RECOVERY_STUCK_FOR]),
        t[EVICTIONS_10M],
        t[LNET_DROPS_PER_SECOND],
    )
    return (
        _ost_fill("LustreOSTFillHigh", t[OST_FILL_WARNING], "30m", "warning"),
        _ost_fill(
            "LustreOSTFillCritical",
            t[OST_FILL_CRITICAL],
            "10m",
            "critical",
            consequence="; writes will soon fail with ENOSPC",
        ),
        _alert(
            name="LustreOSTFillPredicted",
            expr=(
                f"predict_linear({OST_FILL}[6h], {num(t[FULL_WITHIN])}) > 1"
                f"\nand\n{OST_FILL} > {num(t[PREDICT_MIN_FILL])}"
            ),
            for_="1h",
            severity="warning",
            summary="A Lustre OST will be full soon at its current fill rate.",
            description="OST "
            + TARGET
            + f" will be full within {num(t[FULL_WITHIN] / 3600)} hours at the fill rate of "
            "the last 6 hours (predicted {{ $value | humanizePercentage }}).",
            expr_summary=(
                f"6-hour fill trend reaches 100% within {num(t[FULL_WITHIN] / 3600)} h, "
                f"OST over {pct(t[PREDICT_MIN_FILL])} full"
            ),
        ),
        _above(
            "LustreInodesNearlyExhausted",
            INODES_USED,
            t[INODE_FILL],
            "30m",
            "critical",
            f"A Lustre target has used more than {pct(t[INODE_FILL])} of its inodes.",
            TARGET + " has used {{ $value | humanizePercentage }} of its inodes; file creation "
            "fails with ENOSPC when they run out.",
            f"used inodes (`lustre_target_files`) > {pct(t[INODE_FILL])}",
        ),
        _alert(
            name="LustreTargetInactive",
            expr="count by (site, cluster, fs, target) (lustre_target_active == 0)",
            for_="10m",
            severity="warning",
            summary="A Lustre OST or MDT is deactivated.",
            description=TARGET
            + " is deactivated on {{ $value | humanize }} nodes: files on it cannot be "
            "read or written there.",
            expr_summary="a target with `lustre_target_active == 0` on any node",
        ),
        _above(
            "LustreOSTImbalance",
            FILL_SPREAD,
            spread,
            "1h",
            "warning",
            "Lustre OSTs are unevenly filled.",
            "The fullest and the emptiest OST of "
            + FS
            + " differ by {{ $value | humanizePercentage }} of their capacity.",
            f"max - min OST used fraction per file system > {num(spread)}",
        ),
        _above(
            "LustreMetadataLatencyHigh",
            MDT_LATENCY,
            latency,
            "15m",
            "warning",
            "Lustre metadata operations are slow.",
            "Metadata operations on "
            + TARGET
            + " take {{ $value | humanizeDuration }} on average.",
            f"mean MDT operation latency > {num(latency * 1000)} ms",
        ),
        _alert(
            name="LustreHealthCheckFailed",
            expr='lustre_health_check{state!="healthy"} == 1',
            for_="5m",
            severity="critical",
            summary="A Lustre server or client reports itself unhealthy.",
            description="health_check of "
            + HOST
            + " has read {{ $labels.state }} (not healthy) for 5 minutes.",
            expr_summary="health_check is `NOT HEALTHY` or `LBUG`",
        ),
        _alert(
            name="LustreRecoveryStuck",
            expr='lustre_target_recovery_status{status=~"recovering|waiting"} == 1',
            for_=stuck,
            severity="critical",
            summary="A Lustre target has been in recovery for too long.",
            description="{{ $labels.target }} of {{ $labels.fs }} on "
            + HOST
            + f" has been in recovery for {num(t[RECOVERY_STUCK_FOR] / 60)} minutes;"
            " IO to it is blocked.",
            expr_summary=f"recovery_status RECOVERING or WAITING for {stuck}",
        ),
        _above(
            "LustreEvictionStorm",
            EVICTIONS,
            evictions,
            "2m",
            "warning",
            "A Lustre target is evicting many clients.",
            TARGET + " evicted {{ $value | humanize }} clients in the last 10 minutes.",
            f"more than {num(evictions)} evictions from one target in 10 minutes",
        ),
        _above(
            "LustreLNetDrops",
            LNET_DROPS,
            drops,
            "15m",
            "warning",
            "LNet is dropping messages.",
            "LNet on " + HOST + " drops {{ $value | humanize }} messages per second.",
            f"LNet drops > {num(drops)}/s (5-minute rate)",
        ),
    )
