"""DR: Velero backups against their schedules, storage, restore drills, leadership, sites."""

from __future__ import annotations

from functools import partial
from typing import Any

from gotthard.monitoring.rule_model import AlertRule, RecordingRule, on_condition
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
LAST_FAILURE = "gotthard_dr_backup_last_failure_timestamp_seconds"
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
LEADER = "gotthard_dr_leader"

RECORDING_RULES: tuple[RecordingRule, ...] = ()

# DR series carry the site they describe; their scrape jobs set `cluster` to that site's
# Kubernetes cluster. The dashboard gets the site only.
_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD, url_labels=("site",))


def _led(series: str) -> str:
    """*series* as the replica that holds the Lease now exports it. Backups, drills,
    storage checks and placement run only at the leader: a follower's series are a former
    leader's frozen values (or only the schedules it loaded), never a current judgement."""
    return f"({series} and on (job, instance) {LEADER} == 1)"


def _age(labels: str, last: str, loaded: str) -> str:
    """Seconds since the leader's last success by *labels*, or since it loaded the
    schedule when it has not succeeded yet (no *last* series)."""
    return (
        f"time() - (\n  max by ({labels}) {_led(last)}\n  or\n  max by ({labels}) {_led(loaded)}\n)"
    )


def _judged(name: str, condition: str, *args: Any, note: str = "") -> AlertRule:
    """:func:`on_condition` on *condition* (``SERIES OP VALUE``) over the leader's series;
    *args* are its ``for_``, severity, summary and description."""
    series, op_value = condition.split(" ", 1)
    judged = f"{_led(series)} {op_value}"
    summary = f"`{condition}`{note}, as the replica that leads exports it"
    return on_condition(_alert, name, judged, *args, expr_summary=summary)


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    grace, drill_grace, rto = t[BACKUP_GRACE], t[DRILL_GRACE], t[RTO_TARGET]
    # the `for` of these alerts, also quoted in their descriptions
    leaderless, moved_for = duration(t[LEADER_MISSING_FOR]), duration(t[FAILED_OVER_FOR])
    by_schedule = "site, cluster, schedule"
    period = f"max by ({by_schedule}, namespace) {_led(SCHEDULE_PERIOD)}"
    return (
        _alert(
            name="DRBackupTooOld",
            # one series per namespace of the schedule, for the dr.backup_now step
            expr=(
                f"{period} * 0\n+ on ({by_schedule}) group_left ()\n(\n"
                + _age(by_schedule, LAST_BACKUP, SCHEDULE_LOADED)
                + f"\n)\n> on ({by_schedule}, namespace)\n{period} + {num(grace)}"
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
                f"last Completed backup (or, never, the schedule's load by the leader) older "
                f"than the cron's period + {num(grace / 3600)} h"
            ),
        ),
        _alert(
            name="DRBackupFailed",
            # explicit state, not a counter's increase over a window: it fires as soon as
            # a backup ends PartiallyFailed/Failed/FailedValidation/Timeout and resolves
            # only once a later backup of the schedule Completed (a repair)
            expr=(
                f"max by ({by_schedule}) {_led(LAST_FAILURE)}\n"
                f"> on ({by_schedule})\n(\n"
                f"  max by ({by_schedule}) {_led(LAST_BACKUP)}\n  or\n"
                f"  max by ({by_schedule}) {_led(LAST_FAILURE)} * 0\n)"
            ),
            for_="0s",
            severity="warning",
            summary="The last backup of a schedule did not complete.",
            description=(
                "The last finished backup of schedule {{ $labels.schedule }} at "
                "{{ $labels.site }} ended PartiallyFailed, Failed, FailedValidation or "
                "timed out (at {{ $value | humanizeTimestamp }}), and no backup of the "
                "schedule has completed since: what it missed is not restorable."
            ),
            expr_summary=(
                "a backup of the schedule ended PartiallyFailed, Failed, FailedValidation "
                "or timed out after its last Completed one, as the replica that leads saw it"
            ),
        ),
        _judged(
            "DRBackupStorageUnavailable",
            f"{STORAGE_AVAILABLE} == 0",
            "15m",
            "warning",
            "A Velero backup storage location is unavailable.",
            "BackupStorageLocation {{ $labels.location }} at {{ $labels.site }} has been "
            "unavailable for 15 minutes; backups to it fail.",
            note=" for 15 minutes",
        ),
        _judged(
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
                _age("site, cluster, namespace", DRILL_LAST, DRILL_LOADED)
                + "\n> on (site, cluster, namespace)\n"
                + f"max by (site, cluster, namespace) {_led(DRILL_PERIOD)} + {num(drill_grace)}"
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
                f"last drill (or, never, its load by the leader) older than the cron's "
                f"period + {num(drill_grace / 3600)} h"
            ),
        ),
        _judged(
            "DRRTOOverTarget",
            f"{DRILL_RTO} > {num(rto)}",
            "5m",
            "warning",
            "The measured recovery time exceeds the RTO target.",
            "The last drill of namespace {{ $labels.namespace }} at {{ $labels.site }} took "
            "{{ $value | humanizeDuration }} to restore and verify (target "
            f"{num(rto / 60)} minutes).",
            note=f" (drill RTO > {num(rto / 60)} minutes)",
        ),
        _judged(
            "DRTierBreach",
            f"{TIER_BREACH} == 1",
            "5m",
            "warning",
            "A namespace misses its recovery tier's objective.",
            "Namespace {{ $labels.namespace }} at {{ $labels.site }} misses the "
            "{{ $labels.objective }} objective of recovery tier {{ $labels.tier }} "
            "([dr.tiers] in the site file).",
            note=" (objective rpo or rto of the namespace's tier)",
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
                f"runs. {LEASE_HOLDER} at that site names the last holder and the Lease."
            ),
            expr_summary=(
                f"`{LEASE_RENEWED}` older than twice `{LEASE_DURATION}`, as a replica at "
                "the site that still reads the Lease sees it"
            ),
        ),
        _alert(
            name="DRLeaderAtBothSites",
            # two replicas that each hold "the" Lease read two different Leases (their
            # [dr.lease] site differs, or is empty at both): each site alone looks fine,
            # only both sites' data together show it, so it runs at the global evaluator
            # replicas counted by instance: one replica federated twice is one leader
            expr=f"{LEADER} == 1\nand on ()\ncount(count by (instance) ({LEADER} == 1)) > 1",
            for_="5m",
            severity="critical",
            summary="More than one DR daemon replica leads: their placement decisions fight.",
            description=(
                "The DR replica {{ $labels.instance }} at {{ $labels.site }} and at least "
                "one other replica both hold a DR Lease: they read different Leases, so two "
                "schedulers run backups and drills and two placement controllers move "
                "services."
            ),
            expr_summary=f"more than one replica with `{LEADER} == 1` over both sites",
            placement="global",
        ),
        _judged(
            "DRSiteUnhealthy",
            f"{SITE_HEALTHY} == 0",
            "5m",
            "critical",
            "The DR placement controller judges a site unhealthy.",
            "The placement controller has judged site {{ $labels.site }} unhealthy for "
            "5 minutes; services may fail over to the other site.",
        ),
        _judged(
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
            note=" (off its primary site, or a spread degraded)",
        ),
    )
