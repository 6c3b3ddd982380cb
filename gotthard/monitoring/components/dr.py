"""DR: Velero backups against their schedules, storage, restore drills, leadership, sites."""

from __future__ import annotations

from functools import partial

from gotthard.monitoring.rule_model import AlertRule, RecordingRule, above, on_condition
from gotthard.monitoring.thresholds import ThresholdValues, duration, lasting, num, seconds

COMPONENT = "dr"
DASHBOARD = "dr"

BACKUP_GRACE = seconds(
    "dr_backup_grace_seconds", 2 * 3600, "slack after a backup schedule's period before it is late"
)
DRILL_GRACE = seconds(
    "dr_drill_grace_seconds", 4 * 3600, "slack after a drill's period before it is overdue"
)
RTO_TARGET = seconds("dr_rto_target_seconds", 3600, "recovery time objective of a drill")
# the expression itself waits two lease durations (60 s with the default 30 s Lease)
LEADER_MISSING_FOR = lasting(
    "dr_leader_missing_for",
    60,
    "how long the DR Lease may stay unrenewed past two lease durations before it pages",
)
# the placement controller has already waited failover_after evaluations before moving
FAILED_OVER_FOR = lasting(
    "dr_failed_over_for",
    300,
    "how long a placed service may run off its primary site (or degraded) before it alerts",
)

LAST_BACKUP = "gotthard_dr_backup_last_success_timestamp_seconds"
SCHEDULE_PERIOD = "gotthard_dr_schedule_period_seconds"
SCHEDULE_LOADED = "gotthard_dr_schedule_loaded_timestamp_seconds"
DRILL_PASSED = "gotthard_dr_drill_last_success"
DRILL_LAST = "gotthard_dr_drill_last_timestamp_seconds"
DRILL_PERIOD = "gotthard_dr_drill_period_seconds"
DRILL_LOADED = "gotthard_dr_drill_loaded_timestamp_seconds"
DRILL_RTO = "gotthard_dr_drill_rto_seconds"
DRILL_RPO = "gotthard_dr_drill_rpo_seconds"
TIER_BREACH = "gotthard_dr_tier_breach"
SITE_HEALTHY = "gotthard_dr_site_healthy"
FAILED_OVER = "gotthard_dr_service_failed_over"
STORAGE_AVAILABLE = "gotthard_dr_backup_storage_location_available"
LEASE_RENEWED = "gotthard_dr_lease_renew_timestamp_seconds"
LEASE_DURATION = "gotthard_dr_lease_duration_seconds"
LEASE_READ = "gotthard_dr_lease_read_timestamp_seconds"
LEASE_HOLDER = "gotthard_dr_lease_holder_info"

RECORDING_RULES: tuple[RecordingRule, ...] = ()

# DR series carry the site they describe, not a cluster: the dashboard gets the site only.
_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD, url_labels=("site",))


def _age(labels: str, last: str, loaded: str) -> str:
    """Seconds since the last success by *labels*, or since the daemon loaded the
    schedule when it has not succeeded yet (no *last* series)."""
    return f"time() - (\n  max by ({labels}) ({last})\n  or\n  max by ({labels}) ({loaded})\n)"


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    grace, drill_grace, rto = t[BACKUP_GRACE], t[DRILL_GRACE], t[RTO_TARGET]
    # the `for` of these alerts, also quoted in their descriptions
    leaderless, moved_for = duration(t[LEADER_MISSING_FOR]), duration(t[FAILED_OVER_FOR])
    period = f"max by (site, schedule, namespace) ({SCHEDULE_PERIOD})"
    return (
        _alert(
            name="DRBackupTooOld",
            # one series per namespace of the schedule, for the dr.backup_now step
            expr=(
                f"{period} * 0\n+ on (site, schedule) group_left ()\n(\n"
                + _age("site, schedule", LAST_BACKUP, SCHEDULE_LOADED)
                + f"\n)\n> on (site, schedule, namespace)\n{period} + {num(grace)}"
            ),
            for_="15m",
            severity="warning",
            summary="No backup has completed within its schedule's period.",
            description=(
                "No backup of schedule {{ $labels.schedule }} (namespace "
                "{{ $labels.namespace }}) at {{ $labels.site }} has completed for "
                "{{ $value | humanizeDuration }}, longer than the schedule's period plus "
                f"{num(grace / 3600)} h."
            ),
            expr_summary=(
                f"last Completed backup (or, never, the schedule's load) older than the "
                f"cron's period + {num(grace / 3600)} h"
            ),
        ),
        on_condition(
            _alert,
            "DRBackupStorageUnavailable",
            f"{STORAGE_AVAILABLE} == 0",
            "15m",
            "warning",
            "A Velero backup storage location is unavailable.",
            "BackupStorageLocation {{ $labels.location }} at {{ $labels.site }} has been "
            "unavailable for 15 minutes; backups to it fail.",
            " for 15 minutes",
        ),
        on_condition(
            _alert,
            "DRDrillFailed",
            f"{DRILL_PASSED} == 0",
            "5m",
            "warning",
            "The last DR drill failed.",
            "The last restore drill of namespace {{ $labels.namespace }} at "
            "{{ $labels.site }} did not verify; restores from its backups are unproven.",
        ),
        _alert(
            name="DRDrillOverdue",
            expr=(
                _age("site, namespace", DRILL_LAST, DRILL_LOADED)
                + "\n> on (site, namespace)\n"
                + f"max by (site, namespace) ({DRILL_PERIOD}) + {num(drill_grace)}"
            ),
            for_="15m",
            severity="warning",
            summary="A DR drill has not run within its period.",
            description=(
                "The restore drill of namespace {{ $labels.namespace }} at {{ $labels.site }} "
                "last ran {{ $value | humanizeDuration }} ago (or never), longer than its "
                f"period plus {num(drill_grace / 3600)} h."
            ),
            expr_summary=(
                f"last drill (or, never, its load) older than the cron's period + "
                f"{num(drill_grace / 3600)} h"
            ),
        ),
        above(
            _alert,
            "DRRTOOverTarget",
            DRILL_RTO,
            rto,
            "5m",
            "warning",
            "The measured recovery time exceeds the RTO target.",
            "The last drill of namespace {{ $labels.namespace }} at {{ $labels.site }} took "
            "{{ $value | humanizeDuration }} to restore and verify (target "
            f"{num(rto / 60)} minutes).",
            f"drill RTO > {num(rto / 60)} minutes",
        ),
        on_condition(
            _alert,
            "DRTierBreach",
            f"{TIER_BREACH} == 1",
            "5m",
            "warning",
            "A namespace misses its recovery tier's objective.",
            "Namespace {{ $labels.namespace }} at {{ $labels.site }} misses the "
            "{{ $labels.objective }} objective of recovery tier {{ $labels.tier }} "
            "([dr.tiers] in the site file).",
            " (objective rpo or rto of the namespace's tier)",
        ),
        _alert(
            name="DRNoLeader",
            # every replica, leader or follower, exports the Lease as it reads it: each
            # site judges from its own replica, and a follower's site sees the leader renew.
            # Judged only from a replica that still reads the Lease (within two lease
            # durations): one that lost the Lease's API server knows nothing new. No
            # absent(): a site that scrapes no replica has a target problem
            # (GotthardExporterDown while the target is down), not a leaderless DR.
            expr=(
                f"time() - max by (site, cluster) ({LEASE_RENEWED})\n"
                f"> 2 * max by (site, cluster) ({LEASE_DURATION})\n"
                "and on (site, cluster)\n"
                f"time() - max by (site, cluster) ({LEASE_READ})\n"
                f"< 2 * max by (site, cluster) ({LEASE_DURATION})"
            ),
            for_=leaderless,
            severity="critical",
            summary="Nobody renews the DR daemon's Lease: backups and drills do not run.",
            description=(
                "The DR daemon's Lease, as the replica at {{ $labels.site }} reads it, was "
                "last renewed {{ $value | humanizeDuration }} ago, more than two lease "
                "durations: no replica leads, so no backup, drill or placement decision "
                f"runs. {LEASE_HOLDER} at that site names the last holder."
            ),
            expr_summary=(
                f"`{LEASE_RENEWED}` older than twice `{LEASE_DURATION}`, as a replica at "
                "the site that still reads the Lease sees it"
            ),
        ),
        on_condition(
            _alert,
            "DRSiteUnhealthy",
            f"{SITE_HEALTHY} == 0",
            "5m",
            "critical",
            "The DR placement controller judges a site unhealthy.",
            "The placement controller has judged site {{ $labels.site }} unhealthy for "
            "5 minutes; services may fail over to the other site.",
        ),
        on_condition(
            _alert,
            "DRServiceFailedOver",
            f"{FAILED_OVER} == 1",
            moved_for,
            "warning",
            "A placed service runs off its primary site, or on fewer sites than usual.",
            "The placement controller has run service {{ $labels.service }} at "
            "{{ $labels.site }} instead of its usual placement (primary site "
            f"{{{{ $labels.primary_site }}}}) for {moved_for}: "
            "a failover, or a spread service degraded to its healthy sites. It moves "
            "back after the failback cool-down once the sites are healthy again.",
            " (off its primary site, or a spread degraded)",
        ),
    )
