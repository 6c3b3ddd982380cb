"""Gotthard itself: exporters scraped, collectors fresh, runbook actions working, TLS valid."""

from __future__ import annotations

from functools import partial

from gotthard.monitoring.rule_model import AlertRule, RecordingRule
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
        _alert(
            name="GotthardExporterDown",
            expr='up{job=~"gotthard.*"} == 0',
            for_="5m",
            severity="warning",
            summary="A Gotthard exporter cannot be scraped.",
            description=(
                "Prometheus has not scraped {{ $labels.job }} target {{ $labels.instance }} "
                "({{ $labels.site }}/{{ $labels.cluster }}) for 5 minutes; its alerts cannot "
                "fire."
            ),
            expr_summary='`up{job=~"gotthard.*"} == 0`',
        ),
        _alert(
            name="GotthardCollectorDown",
            expr="gotthard_collector_up == 0",
            for_="5m",
            severity="warning",
            summary="A Gotthard collector is failing.",
            description=(
                "Collector {{ $labels.collector }} of exporter {{ $labels.instance }} "
                "({{ $labels.site }}/{{ $labels.cluster }}) has failed its polls for 5 "
                "minutes; its metrics are missing."
            ),
            expr_summary="`gotthard_collector_up == 0`",
        ),
        _alert(
            name="GotthardCollectorStale",
            expr=(
                "time() - gotthard_collector_last_success_timestamp_seconds"
                f" > {num(t[COLLECTOR_STALE])}"
            ),
            for_="5m",
            severity="warning",
            summary="A Gotthard collector serves old data.",
            description=(
                "Collector {{ $labels.collector }} of exporter {{ $labels.instance }} "
                "({{ $labels.site }}/{{ $labels.cluster }}) last polled successfully "
                "{{ $value | humanizeDuration }} ago; its metrics are stale."
            ),
            expr_summary=(
                f"last successful poll of a collector older than {num(t[COLLECTOR_STALE] / 60)} "
                "minutes"
            ),
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
        _alert(
            name="GotthardTLSCertificateExpiring",
            expr=f"{CERTIFICATE_NOT_AFTER} - time() < {num(t[CERTIFICATE_EXPIRY])}",
            for_="15m",
            severity="warning",
            summary="A TLS certificate Gotthard serves expires soon.",
            description=(
                "The certificate {{ $labels.instance }} serves on {{ $labels.listen }} "
                "({{ $labels.site }}/{{ $labels.cluster }}) expires in "
                "{{ $value | humanizeDuration }}."
            ),
            expr_summary=(
                f"served certificate's notAfter within {num(t[CERTIFICATE_EXPIRY] / 86400)} days"
            ),
        ),
    )
