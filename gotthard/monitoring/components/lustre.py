"""Lustre: OST and MDT fill and balance, metadata latency, health, recovery, evictions,
LNet.

Severity follows the blast radius: a server (a node whose exporter reports
``gotthard_lustre_node_role_info`` ``oss``, ``mds`` or ``mgs``) serves every client of its file
system, a client only its own jobs. Health and recovery judge the last reading within
``lustre_state_lookback_seconds``: a broken server whose exporter stops answering (a
hung node, a reboot loop) keeps its alert until it reads healthy again.
"""

from __future__ import annotations

from functools import partial

from gotthard.monitoring.components.slurm import respecting_maintenance
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
# node-mixin's two tiers (NodeFilesystemSpaceFillingUp): 24 h at 60% full opens a ticket,
# 4 h at 80% full pages, judged on the last hour so that a sudden fill pages hours early
FULL_CRITICAL_WITHIN = seconds(
    "lustre_ost_full_critical_within_seconds",
    4 * 3600,
    "time to full (last hour's trend) that pages",
)
PREDICT_CRITICAL_MIN_FILL = ratio(
    "lustre_ost_predict_critical_min_fill",
    0.80,
    "OST used fraction from which the paging fill trend counts",
)
MDT_FILL_WARNING = ratio("lustre_mdt_fill_warning", 0.85, "MDT used fraction that opens a ticket")
MDT_FILL_CRITICAL = ratio("lustre_mdt_fill_critical", 0.90, "MDT used fraction that pages")
STATE_LOOKBACK = seconds(
    "lustre_state_lookback_seconds",
    6 * 3600,
    "how long the last health or recovery reading of a node that stopped reporting counts",
)
INODE_FILL = ratio("lustre_inode_fill", 0.90, "used fraction of a target's inodes that pages")
OST_FILL_SPREAD = ratio("lustre_ost_fill_spread", 0.20, "fullest minus emptiest OST")
MDT_LATENCY_SECONDS = seconds("lustre_mdt_latency_seconds", 0.05, "mean MDT operation latency")
# the default hard recovery window of 2.12+ is 900 s; sites raise it for big client
# counts, rarely past 30 minutes
HEALTH_FAILED_FOR = lasting(
    "lustre_health_check_failed_for", 300, "how long health_check may read unhealthy"
)
RECOVERY_STUCK_FOR = lasting(
    "lustre_recovery_stuck_for", 1800, "recovery time after which it is stuck"
)
EVICTIONS_10M = count("lustre_evictions_10m", 10, "clients evicted from one target in 10 minutes")
TARGET_UNREACHABLE = ratio(
    "lustre_target_unreachable_fraction",
    0.5,
    "fraction of a target's clients not connected to its server that pages",
)
LNET_DROPS_PER_SECOND = per_second("lustre_lnet_drops_per_second", 1.0, "LNet drops/s on one node")

CAPACITY = "site_cluster_fs_target:gotthard_lustre_ost_capacity_bytes:max"
AVAILABLE = "site_cluster_fs_target:gotthard_lustre_ost_available_bytes:max"
OST_FILL = "site_cluster_fs_target:gotthard_lustre_ost_fill:ratio"
MDT_CAPACITY = "site_cluster_fs_target:gotthard_lustre_mdt_capacity_bytes:max"
MDT_AVAILABLE = "site_cluster_fs_target:gotthard_lustre_mdt_available_bytes:max"
MDT_FILL = "site_cluster_fs_target:gotthard_lustre_mdt_fill:ratio"
FS_FILL = "site_cluster_fs:gotthard_lustre_ost_fill:ratio"
FILL_SPREAD = "site_cluster_fs:gotthard_lustre_ost_fill:spread"
MDT_OPERATIONS = "site_cluster_fs_target_operation:gotthard_lustre_mdt_operations:rate5m"
FS_MDT_OPERATIONS = "site_cluster_fs:gotthard_lustre_mdt_operations:rate5m"
MDT_LATENCY = "site_cluster_fs_target:gotthard_lustre_mdt_operation_latency_seconds:mean5m"
EVICTIONS = "site_cluster_fs_target:gotthard_lustre_evictions:increase10m"
LNET_DROPS = "site_cluster_instance:gotthard_lustre_lnet_drops:rate5m"
INODES_USED = "site_cluster_fs_target:gotthard_lustre_target_files_used:ratio"
#: LNet bytes per second (``direction`` send or receive) of each Lustre server, and of
#: every node of a cluster together, clients included: what the Lustre dashboard's LNet
#: panel draws. Drawn per node, it read every client (2,740 nodes at Alps size) at every
#: step of a day (docs/scale.md), so both are slow records.
LNET_SERVER_BYTES = "site_cluster_instance_direction:gotthard_lustre_server_lnet_bytes:rate5m"
LNET_BYTES = "site_cluster_direction:gotthard_lustre_lnet_bytes:rate5m"
#: How many nodes the LNet drops panel draws per cluster.
TOP_DROPPING = 10
#: The :data:`TOP_DROPPING` nodes of each cluster that drop the most LNet messages (only
#: nodes that drop): what the dashboard's LNet drops panel draws over a day, instead of
#: every node of the cluster at every step (``slow``; LustreLNetDrops reads LNET_DROPS).
LNET_DROPS_TOP = f"site_cluster_instance:gotthard_lustre_lnet_drops:top{TOP_DROPPING}_rate5m"
#: Per-job IO over every target of a file system (job_stats, ``--lustre.job-stats``): what
#: the per-job panels read, one series per job and file system instead of one per job
#: and target (a 24 h panel over the raw series takes seconds at Alps size, docs/scale.md).
JOB_READ = "site_cluster_fs_job_id:gotthard_lustre_job_read_bytes:rate5m"
JOB_WRITE = "site_cluster_fs_job_id:gotthard_lustre_job_write_bytes:rate5m"
JOB_MDT_OPERATIONS = "site_cluster_fs_job_id:gotthard_lustre_job_mdt_operations:rate5m"
#: How many jobs the "Top jobs" records keep per file system.
TOP_JOBS = 10
#: The :data:`TOP_JOBS` busiest jobs of each file system, of each per-job record above:
#: what the "Top jobs" panels rank over a day (ranking every job at every step of a day
#: took seconds at 1,000 jobs, docs/scale.md). The top jobs of any selection of file
#: systems are among the top jobs of each.
JOB_READ_TOP = "site_cluster_fs_job_id:gotthard_lustre_job_read_bytes:top10_rate5m"
JOB_WRITE_TOP = "site_cluster_fs_job_id:gotthard_lustre_job_write_bytes:top10_rate5m"
JOB_MDT_OPERATIONS_TOP = "site_cluster_fs_job_id:gotthard_lustre_job_mdt_operations:top10_rate5m"
_MDT_RATE = 'rate(gotthard_lustre_operations_total{component="mdt"}[5m])'
#: Each node's LNet bytes per second, with a ``direction`` label (send, receive).
_LNET_RATE = (
    'label_replace(rate(gotthard_lustre_lnet_send_bytes_total[5m]), "direction", "send", "", "")'
    "\n  or\n  "
    'label_replace(rate(gotthard_lustre_lnet_receive_bytes_total[5m]), "direction", "receive",'
    ' "", "")'
)
#: a client's import of a target that has no connection to the target's server
_DISCONNECTED = "gotthard_lustre_target_import_connected == 0"
#: Each client's imports counted by state per file system: a few series per client, where
#: the per-target gauges are two per OST (clients may export only the ones in trouble).
_CLIENT_IMPORTS = "gotthard_lustre_client_imports"
#: ``gotthard_lustre_node_role_info`` values of a node that serves a file system
SERVER_ROLES = 'role=~"oss|mds|mgs"'


def _target_max(record: str, metric: str, components: str = "ost|osc") -> RecordingRule:
    """One value per target: the same OST (MDT) is reported by its server and by every
    client's osc (mdc)."""
    return RecordingRule(
        COMPONENT,
        record,
        f'max by (site, cluster, fs, target) ({metric}{{component=~"{components}"}})',
    )


def _fill(record: str, available: str, capacity: str) -> RecordingRule:
    return RecordingRule(COMPONENT, record, f"1 - (\n  {available}\n  /\n  ({capacity} > 0)\n)")


def _job_rate(record: str, counter: str) -> RecordingRule:
    """A per-job rate over every target: one of the largest rule costs of a site with job
    stats on (docs/scale.md), read by panels only, so it is evaluated in the slow group."""
    return RecordingRule(
        COMPONENT,
        record,
        f"sum by (site, cluster, fs, job_id) (rate({counter}[5m]))",
        cadence="slow",
    )


def _top_jobs(record: str, jobs: str) -> RecordingRule:
    """The busiest jobs of each file system, from the per-job record *jobs* (evaluated
    before it, in the same group)."""
    return RecordingRule(
        COMPONENT, record, f"topk by (site, cluster, fs) ({TOP_JOBS}, {jobs})", cadence="slow"
    )


RECORDING_RULES = (
    _job_rate(JOB_READ, "gotthard_lustre_job_read_bytes_total"),
    _job_rate(JOB_WRITE, "gotthard_lustre_job_write_bytes_total"),
    _job_rate(
        JOB_MDT_OPERATIONS, 'gotthard_lustre_job_operations_total{target=~".*-MDT[0-9a-fA-F]+"}'
    ),
    _top_jobs(JOB_READ_TOP, JOB_READ),
    _top_jobs(JOB_WRITE_TOP, JOB_WRITE),
    _top_jobs(JOB_MDT_OPERATIONS_TOP, JOB_MDT_OPERATIONS),
    _target_max(CAPACITY, "gotthard_lustre_target_capacity_bytes"),
    _target_max(AVAILABLE, "gotthard_lustre_target_available_bytes"),
    _fill(OST_FILL, AVAILABLE, CAPACITY),
    _target_max(MDT_CAPACITY, "gotthard_lustre_target_capacity_bytes", "mdt|mdc"),
    _target_max(MDT_AVAILABLE, "gotthard_lustre_target_available_bytes", "mdt|mdc"),
    _fill(MDT_FILL, MDT_AVAILABLE, MDT_CAPACITY),
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
        "site_cluster_fs_target:gotthard_lustre_mdt_operation_latency_seconds:rate5m",
        "sum by (site, cluster, fs, target) "
        '(rate(gotthard_lustre_operation_latency_seconds_total{component="mdt"}[5m]))',
    ),
    RecordingRule(
        COMPONENT,
        "site_cluster_fs_target:gotthard_lustre_mdt_timed_operations:rate5m",
        "sum by (site, cluster, fs, target) (\n"
        f"  {_MDT_RATE}\n"
        '  and gotthard_lustre_operation_latency_seconds_total{component="mdt"}\n)',
    ),
    RecordingRule(
        COMPONENT,
        MDT_LATENCY,
        "site_cluster_fs_target:gotthard_lustre_mdt_operation_latency_seconds:rate5m"
        "\n/\n(site_cluster_fs_target:gotthard_lustre_mdt_timed_operations:rate5m > 0)",
    ),
    RecordingRule(
        COMPONENT,
        EVICTIONS,
        "sum by (site, cluster, fs, target) "
        "(increase(gotthard_lustre_target_evictions_total[10m]))",
    ),
    # Inodes of a target (objects on an OST, files on an MDT), as its server or any
    # client reports them.
    RecordingRule(
        COMPONENT,
        INODES_USED,
        '1 - (\n  max by (site, cluster, fs, target) (gotthard_lustre_target_files{state="free"})'
        "\n  /\n  (max by (site, cluster, fs, target)"
        ' (gotthard_lustre_target_files{state="total"}) > 0)\n)',
    ),
    RecordingRule(
        COMPONENT,
        LNET_DROPS,
        "sum by (site, cluster, instance) (rate(gotthard_lustre_lnet_drop_messages_total[5m]))",
    ),
    RecordingRule(
        COMPONENT,
        LNET_SERVER_BYTES,
        f"sum by (site, cluster, instance, direction) (\n  {_LNET_RATE}\n)\n"
        f"and on (site, cluster, instance)\ngotthard_lustre_node_role_info{{{SERVER_ROLES}}}",
        cadence="slow",
    ),
    RecordingRule(
        COMPONENT,
        LNET_BYTES,
        f"sum by (site, cluster, direction) (\n  {_LNET_RATE}\n)",
        cadence="slow",
    ),
    RecordingRule(
        COMPONENT,
        LNET_DROPS_TOP,
        f"topk by (site, cluster) ({TOP_DROPPING}, {LNET_DROPS} > 0)",
        cadence="slow",
    ),
)

_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD)
_above = partial(above, _alert)


def _fill_above(
    name: str,
    threshold: float,
    for_: str,
    severity: Severity,
    consequence: str = "",
    kind: str = "OST",
) -> AlertRule:
    """An OST (or MDT) fuller than *threshold*; *consequence* ends the description."""
    return _above(
        name,
        OST_FILL if kind == "OST" else MDT_FILL,
        threshold,
        for_,
        severity,
        f"A Lustre {kind} is more than {pct(threshold)} full.",
        kind + " " + TARGET + " is {{ $value | humanizePercentage }} full" + consequence + ".",
        f"{kind} used fraction > {pct(threshold)}",
    )


def _last(selector: str, lookback: str) -> str:
    """The last reading of *selector* within *lookback*: a series that went stale (its
    exporter or node stopped answering) keeps its last value until it reads again."""
    return f"last_over_time({selector}[{lookback}])"


def _health(lookback: str, servers: bool) -> str:
    """Nodes whose last health_check reading is not healthy: servers, or clients only."""
    join = "and" if servers else "unless"
    return (
        _last('gotthard_lustre_health_state{state!="healthy"}', lookback)
        + f" == 1\n{join} on (site, cluster, instance)\n"
        + _last(f"gotthard_lustre_node_role_info{{{SERVER_ROLES}}}", lookback)
    )


#: How each half of the health-check alert reads: servers page, one client opens a ticket.
_HEALTH = {
    True: (
        "LustreHealthCheckFailed",
        "critical",
        "server",
        "every client of its targets is affected",
        "an OSS, MDS or MGS",
    ),
    False: (
        "LustreClientHealthCheckFailed",
        "warning",
        "client",
        "its mounts and jobs may hang",
        "a client-only node",
    ),
}


def _health_check(t: ThresholdValues, *, servers: bool) -> AlertRule:
    """A Lustre server's (or a client's) health_check reading not healthy: the last
    reading within the lookback, so that a node that stops answering keeps the alert."""
    name, severity, role, consequence, which = _HEALTH[servers]
    lookback, minutes = duration(t[STATE_LOOKBACK]), num(t[HEALTH_FAILED_FOR] / 60)
    return _alert(
        name=name,
        expr=_health(lookback, servers=servers),
        for_=duration(t[HEALTH_FAILED_FOR]),
        severity=severity,
        summary=f"A Lustre {role} reports itself unhealthy.",
        description=f"health_check of {role} "
        + HOST
        + " has read {{ $labels.state }} (not healthy) for "
        + f"{minutes} minutes; {consequence}.",
        expr_summary=(
            f"last health_check reading of {which} (within {lookback}) is `NOT HEALTHY` or `LBUG`"
        ),
    )


#: The alerts about one node's Lustre client or LNet: quiet on Slurm nodes in maintenance.
_PER_NODE = frozenset({"LustreClientHealthCheckFailed", "LustreLNetPeerDown", "LustreLNetDrops"})


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    """Every Lustre alert; a node's client and LNet alerts respect its maintenance."""
    return tuple(
        respecting_maintenance(rule) if rule.name in _PER_NODE else rule for rule in _alerts(t)
    )


def _alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    spread, latency = t[OST_FILL_SPREAD], t[MDT_LATENCY_SECONDS]
    stuck, evictions, drops = (
        duration(t[RECOVERY_STUCK_FOR]),
        t[EVICTIONS_10M],
        t[LNET_DROPS_PER_SECOND],
    )
    lookback = duration(t[STATE_LOOKBACK])
    return (
        _fill_above("LustreOSTFillHigh", t[OST_FILL_WARNING], "30m", "warning"),
        _fill_above(
            "LustreOSTFillCritical",
            t[OST_FILL_CRITICAL],
            "10m",
            "critical",
            consequence="; writes will soon fail with ENOSPC",
        ),
        _fill_above(
            "LustreMDTFillHigh",
            t[MDT_FILL_WARNING],
            "30m",
            "warning",
            consequence="; file creation fails file-system wide when it is full",
            kind="MDT",
        ),
        _fill_above(
            "LustreMDTFillCritical",
            t[MDT_FILL_CRITICAL],
            "10m",
            "critical",
            consequence="; file creation and metadata updates will soon fail with ENOSPC",
            kind="MDT",
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
        _alert(
            name="LustreOSTFillPredictedCritical",
            expr=(
                f"predict_linear({OST_FILL}[1h], {num(t[FULL_CRITICAL_WITHIN])}) > 1"
                f"\nand\n{OST_FILL} > {num(t[PREDICT_CRITICAL_MIN_FILL])}"
            ),
            for_="15m",
            severity="critical",
            summary="A Lustre OST will be full within hours at its current fill rate.",
            description="OST "
            + TARGET
            + f" will be full within {num(t[FULL_CRITICAL_WITHIN] / 3600)} hours at the fill "
            "rate of the last hour (predicted {{ $value | humanizePercentage }}).",
            expr_summary=(
                "last hour's fill trend reaches 100% within "
                f"{num(t[FULL_CRITICAL_WITHIN] / 3600)} h, "
                f"OST over {pct(t[PREDICT_CRITICAL_MIN_FILL])} full"
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
            f"used inodes (`gotthard_lustre_target_files`) > {pct(t[INODE_FILL])}",
        ),
        _alert(
            name="LustreTargetInactive",
            expr="count by (site, cluster, fs, target) (gotthard_lustre_target_active == 0)",
            for_="10m",
            severity="warning",
            summary="A Lustre OST or MDT is deactivated.",
            description=TARGET
            + " is deactivated on {{ $value | humanize }} nodes: files on it cannot be "
            "read or written there.",
            expr_summary="a target with `gotthard_lustre_target_active == 0` on any node",
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
        _health_check(t, servers=True),
        _health_check(t, servers=False),
        _alert(
            name="LustreRecoveryStuck",
            # the last reading: a server that stops answering mid-recovery keeps the
            # alert; a target that completed recovery on its failover partner does not
            expr=(
                _last(
                    'gotthard_lustre_target_recovery_status{status=~"recovering|waiting"}', lookback
                )
                + " == 1\nunless on (site, cluster, fs, target)\n"
                + 'gotthard_lustre_target_recovery_status{status="complete"} == 1'
            ),
            for_=stuck,
            severity="critical",
            summary="A Lustre target has been in recovery for too long.",
            description="{{ $labels.target }} of {{ $labels.fs }} on "
            + HOST
            + f" has been in recovery for {num(t[RECOVERY_STUCK_FOR] / 60)} minutes;"
            " IO to it is blocked.",
            expr_summary=(
                f"last recovery_status (within {lookback}) RECOVERING or WAITING for "
                f"{stuck}, and no server reports the target COMPLETE"
            ),
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
        _alert(
            name="LustreLNetPeerDown",
            # per client, not per NID: a client that cannot connect tries each failover
            # NID in turn, and its series change NID; a failover reconnects within
            # minutes (replay then counts as connected)
            expr=(
                f'sum by (site, cluster, instance) ({_CLIENT_IMPORTS}{{state="disconnected"}}) > 0'
            ),
            for_="10m",
            severity="warning",
            summary="A Lustre client cannot reach the server (LNet peer) of some targets.",
            description=HOST
            + " has had no connection to the server of {{ $value | humanize }} Lustre "
            "targets for 10 minutes.",
            expr_summary="a client's imports not connected to their server "
            '(`gotthard_lustre_client_imports{state="disconnected"} > 0`)',
        ),
        _alert(
            name="LustreTargetUnreachable",
            expr=(
                # of the clients with the file system mounted (an active import of it)
                f"count by (site, cluster, fs, target) ({_DISCONNECTED})\n"
                "/ on (site, cluster, fs) group_left ()\n"
                "count by (site, cluster, fs) (\n"
                "  sum by (site, cluster, fs, instance) "
                f'({_CLIENT_IMPORTS}{{state!="deactivated"}}) > 0\n)\n'
                f"> {num(t[TARGET_UNREACHABLE])}"
            ),
            for_="10m",
            severity="critical",
            summary="Most clients of a Lustre target cannot reach its server.",
            description="{{ $value | humanizePercentage }} of the clients of "
            + TARGET
            + " have not been connected to its server for 10 minutes; IO to it hangs.",
            expr_summary=(
                f"more than {pct(t[TARGET_UNREACHABLE])} of the clients that mount a file "
                "system are not connected to the server of one of its targets"
            ),
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
