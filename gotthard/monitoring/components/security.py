"""Security: CIS kube-bench results and admission-policy violations."""

from __future__ import annotations

from functools import partial

from gotthard.monitoring.rule_model import AlertRule, RecordingRule, above, expiring, on_condition
from gotthard.monitoring.thresholds import ThresholdValues, num, seconds

COMPONENT = "security"
DASHBOARD = "security-compliance"
RECORDING_RULES: tuple[RecordingRule, ...] = ()

KUBE_BENCH = "gotthard_kube_bench_checks"
KUBE_BENCH_FAILED = "gotthard_kube_bench_check_failed"
VIOLATIONS = "gotthard_policy_violations"
AUDIT_LAST_RUN = "gotthard_audit_last_run_timestamp_seconds"
WAIVER_EXPIRY = "gotthard_kube_bench_waiver_expiry_timestamp_seconds"

# audits run daily: a textfile older than a day plus two hours is stale
WAIVER_NOTICE = seconds(
    "security_waiver_notice_seconds", 14 * 86400, "time left on a kube-bench waiver"
)
AUDIT_MAX_AGE = seconds("security_audit_max_age_seconds", 26 * 3600, "age of an audit textfile")

_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD)


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    max_age = t[AUDIT_MAX_AGE]
    return (
        on_condition(
            _alert,
            "SecurityKubeBenchCheckFailed",
            f"{KUBE_BENCH_FAILED} > 0",
            "15m",
            "warning",
            "A required CIS kube-bench check fails.",
            "kube-bench check {{ $labels.id }} ({{ $labels.node_type }}) fails in "
            "{{ $labels.site }}/{{ $labels.cluster }} and is not waived.",
            " (not waived)",
        ),
        on_condition(
            _alert,
            "SecurityPolicyViolations",
            f"{VIOLATIONS} > 0",
            "15m",
            "warning",
            "Live objects violate the security policies.",
            "{{ $value | humanize }} live objects in {{ $labels.site }}/{{ $labels.cluster }} "
            "violate rule {{ $labels.rule }} of policy {{ $labels.policy }}.",
        ),
        above(
            _alert,
            "SecurityAuditStale",
            f"time() - {AUDIT_LAST_RUN}",
            max_age,
            "15m",
            "warning",
            "Policy or kube-bench results are stale.",
            "{{ $labels.textfile }} on {{ $labels.instance }} "
            "({{ $labels.site }}/{{ $labels.cluster }}) was written "
            "{{ $value | humanizeDuration }} ago; the compliance results are out of date.",
            f"audit textfile older than {num(max_age / 3600)} h",
        ),
        expiring(
            _alert,
            "SecurityWaiverExpiring",
            WAIVER_EXPIRY,
            t[WAIVER_NOTICE],
            "A kube-bench waiver expires soon.",
            "The waiver of kube-bench check {{ $labels.id }} (owner {{ $labels.owner }}) "
            "in {{ $labels.site }}/{{ $labels.cluster }} ends in "
            "{{ $value | humanizeDuration }}; the check then fails unless it is fixed or "
            "the waiver renewed.",
            "a waiver's expiry",
            " (or past)",
        ),
    )
