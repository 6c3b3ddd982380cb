"""Gotthard itself: exporters scraped, collectors fresh, runbook actions working, TLS valid."""

from __future__ import annotations

from functools import partial

from gotthard.monitoring.rule_model import AlertRule, RecordingRule, above, expiring, on_condition
from gotthard.monitoring.thresholds import ThresholdValues, num, seconds

COMPONENT = "self"
DASHBOARD = "site-overview"
RECORDING_RULES: tuple[RecordingRule, ...] = ()

COLLECTOR_STALE = seconds(
    "gotthard_collector_stale_seconds", 900, "age of a collector's last successful poll"
)
CERTIFICATE_EXPIRY = seconds(
    "gotthard_tls_certificate_expiry_seconds", 14 * 86400, "time left on a served certificate"
)

#: Results of a runbook step that did not do what the alert asked for: the action failed,
#: the rate or blast-radius limits refused it, or the alert lacked a valid target label.
ACTION_PROBLEMS = ("failed", "limited", "invalid")
CERTIFICATE_NOT_AFTER = "gotthard_tls_certificate_not_after_timestamp_seconds"

_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD)


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    return (
        on_condition(
            _alert,
            "GotthardExporterDown",
            'up{job=~"gotthard.*"} == 0',
            "5m",
            "warning",
            "A Gotthard exporter cannot be scraped.",
            "Prometheus has not scraped {{ $labels.job }} target {{ $labels.instance }} "
            "({{ $labels.site }}/{{ $labels.cluster }}) for 5 minutes; its alerts cannot "
            "fire.",
        ),
        on_condition(
            _alert,
            "GotthardCollectorDown",
            "gotthard_collector_up == 0",
            "5m",
            "warning",
            "A Gotthard collector is failing.",
            "Collector {{ $labels.collector }} of exporter {{ $labels.instance }} "
            "({{ $labels.site }}/{{ $labels.cluster }}) has failed its polls for 5 "
            "minutes; its metrics are missing.",
        ),
        above(
            _alert,
            "GotthardCollectorStale",
            "time() - gotthard_collector_last_success_timestamp_seconds",
            t[COLLECTOR_STALE],
            "5m",
            "warning",
            "A Gotthard collector serves old data.",
            "Collector {{ $labels.collector }} of exporter {{ $labels.instance }} "
            "({{ $labels.site }}/{{ $labels.cluster }}) last polled successfully "
            "{{ $value | humanizeDuration }} ago; its metrics are stale.",
            f"last successful poll of a collector older than {num(t[COLLECTOR_STALE] / 60)} "
            "minutes",
        ),
        _alert(
            name="GotthardRunbookActionsFailing",
            expr=(
                "sum by (site, cluster, instance, runbook, action, result) (\n"
                "  increase(gotthard_runbook_actions_total"
                f'{{result=~"{"|".join(ACTION_PROBLEMS)}"}}[15m])\n) > 0'
            ),
            for_="0s",
            severity="warning",
            summary="Runbook actions fail or are refused.",
            description=(
                "Runbook {{ $labels.runbook }} step {{ $labels.action }} ended "
                "{{ $labels.result }} {{ $value | humanize }} times in the last 15 minutes "
                "({{ $labels.instance }}, {{ $labels.site }}/{{ $labels.cluster }})."
            ),
            expr_summary=(f"runbook steps ending {', '.join(ACTION_PROBLEMS)} within 15 minutes"),
        ),
        expiring(
            _alert,
            "GotthardTLSCertificateExpiring",
            CERTIFICATE_NOT_AFTER,
            t[CERTIFICATE_EXPIRY],
            "A TLS certificate Gotthard serves expires soon.",
            "The certificate {{ $labels.instance }} serves on {{ $labels.listen }} "
            "({{ $labels.site }}/{{ $labels.cluster }}) expires in "
            "{{ $value | humanizeDuration }}.",
            "served certificate's notAfter",
        ),
    )
