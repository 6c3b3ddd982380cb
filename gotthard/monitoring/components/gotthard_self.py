"""Gotthard itself: the dead man's switch, targets scraped, collectors fresh, rules and
notifications working, clocks in step, runbook actions working, TLS valid.

Scrape jobs these alerts read (job label values):

* ``gotthard-<role>-<site>-<cluster>``: Gotthard's own processes (``job=~"gotthard.*"``);
* ``apiserver`` and the ``extra_targets`` jobs: other targets of a site Prometheus;
* ``prometheus``: a site Prometheus scraping itself, and ``alertmanager``: it scraping the
  site's Alertmanagers (``GotthardRuleEvaluationFailures``, ``GotthardAlertDeliveryFailing``);
* ``federate-<name>``: the global view scraping a site Prometheus' ``/federate``. Only the
  global view has these targets; ``GotthardFederationDown`` assumes that its scrape job
  labels each federation target with the ``site`` (and ``cluster``) of the Prometheus it
  federates, as the site jobs do: ``up`` is the global view's own series, and carries no
  label of the federated site unless its scrape config sets one.

Every target has ``site`` and ``cluster`` target labels; a site Prometheus evaluates the
rules over them (its ``external_labels`` are added only to what leaves it).
"""

from __future__ import annotations

from functools import partial

from gotthard.monitoring.rule_model import (
    AT,
    AlertRule,
    Placement,
    RecordingRule,
    above,
    expiring,
    on_condition,
)
from gotthard.monitoring.thresholds import (
    ThresholdValues,
    count,
    duration,
    num,
    pct,
    ratio,
    seconds,
)

COMPONENT = "self"
DASHBOARD = "site-overview"
RECORDING_RULES: tuple[RecordingRule, ...] = ()

COLLECTOR_STALE = seconds(
    "gotthard_collector_stale_seconds", 900, "age of a collector's last successful poll"
)
CERTIFICATE_EXPIRY = seconds(
    "gotthard_tls_certificate_expiry_seconds", 14 * 86400, "time left on a served certificate"
)
CERTIFICATE_CRITICAL = seconds(
    "gotthard_tls_certificate_critical_seconds",
    86400,
    "time left on a served certificate (or past expiry) that pages",
)
TARGET_FLAPS = count(
    "gotthard_target_flaps_30m",
    6,
    "changes of one target's `up` in 30 minutes that make it flapping (3 outages)",
)
CLOCK_SKEW = seconds(
    "gotthard_clock_skew_seconds",
    0.1,
    "difference between an exporter's clock and Prometheus' scrape time",
)
DELIVERY_FAILURES = ratio(
    "gotthard_notification_failure_ratio",
    0.01,
    "failed fraction of one Alertmanager integration's notifications",
)

#: Results of a runbook step that did not do what the alert asked for: the action failed,
#: the rate or blast-radius limits refused it, or the alert lacked a valid target label.
ACTION_PROBLEMS = ("failed", "limited", "invalid")
CERTIFICATE_NOT_AFTER = "gotthard_tls_certificate_not_after_timestamp_seconds"
#: The exporters' own wall clock at the start of each scrape (see exporters/runtime.py).
EXPORTER_TIME = "gotthard_time_seconds"

#: Gotthard's own scrape jobs, other jobs of a site Prometheus, the global view's
#: federation jobs; and the jobs of Prometheus and Alertmanager scraping themselves.
GOTTHARD_JOBS = 'job=~"gotthard.*"'
OTHER_JOBS = 'job!~"gotthard.*|federate-.*"'
FEDERATION_JOBS = 'job=~"federate-.+"'
PROMETHEUS_JOB = 'job="prometheus"'
ALERTMANAGER_JOB = 'job="alertmanager"'
#: A target is down when it answered fewer than 10% of the scrapes of the last 10
#: minutes (kube-prometheus' TargetDown, per target): a restart or a single failed
#: scrape never counts, a target that answers one scrape in ten still does.
DOWN_WINDOW = "10m"
DOWN_BELOW = 0.1
DOWN_FOR = "5m"
#: ``for`` of the target-down alerts plus the window: how long a target is down first.
DOWN_AFTER = "15 minutes"

_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD)


def _down(jobs: str) -> str:
    return f"avg_over_time(up{{{jobs}}}[{DOWN_WINDOW}]) < {num(DOWN_BELOW)}"


def _target_down(
    name: str, jobs: str, summary: str, description: str, placement: Placement = "site"
) -> AlertRule:
    return on_condition(
        partial(_alert, placement=placement),
        name,
        _down(jobs),
        DOWN_FOR,
        "warning",
        summary,
        description,
        expr_summary=(
            f"`up{{{jobs}}}` answered fewer than {pct(DOWN_BELOW)} of the scrapes of the "
            f"last {DOWN_WINDOW}, for {DOWN_FOR}"
        ),
    )


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    flaps, skew = num(t[TARGET_FLAPS]), t[CLOCK_SKEW]
    failures = t[DELIVERY_FAILURES]
    critical_left = t[CERTIFICATE_CRITICAL]
    return (
        _alert(
            name="GotthardWatchdog",
            # One per site and cluster whose Gotthard targets this Prometheus knows,
            # whether they answer or not: always firing while rules are evaluated and
            # alerts delivered. Alertmanager routes it to the dead man's switch only.
            expr=f"group by (site, cluster) (up{{{GOTTHARD_JOBS}}})",
            for_="0s",
            severity="info",
            summary="The alerting pipeline is working (always firing).",
            description=(
                "Always firing for " + AT + " while its Prometheus evaluates rules and "
                "Alertmanager delivers them; an external dead man's switch pages when it "
                "stops arriving."
            ),
            expr_summary="always, once per site and cluster with Gotthard targets",
        ),
        _target_down(
            "GotthardExporterDown",
            GOTTHARD_JOBS,
            "A Gotthard exporter cannot be scraped.",
            "Prometheus has not scraped {{ $labels.job }} target {{ $labels.instance }} "
            "(" + AT + f") for {DOWN_AFTER}; its alerts cannot fire.",
        ),
        _target_down(
            "GotthardTargetDown",
            OTHER_JOBS,
            "A scrape target of a site Prometheus is down.",
            "Prometheus has not scraped {{ $labels.job }} target {{ $labels.instance }} "
            "(" + AT + f") for {DOWN_AFTER}.",
        ),
        _target_down(
            "GotthardFederationDown",
            FEDERATION_JOBS,
            "The global view cannot federate a site Prometheus.",
            "The global view has not federated {{ $labels.instance }} ({{ $labels.job }}, "
            + AT
            + f") for {DOWN_AFTER}; cross-site alerts and dashboards miss that site.",
            # only the global view scrapes federate-* targets
            placement="global",
        ),
        _alert(
            name="GotthardTargetFlapping",
            expr=f"changes(up[30m]) >= {flaps}",
            for_="5m",
            severity="warning",
            summary="A scrape target keeps going down and up.",
            description=(
                "{{ $labels.job }} target {{ $labels.instance }} (" + AT + ") changed "
                "between up and down {{ $value | humanize }} times in the last 30 minutes."
            ),
            expr_summary=f"`up` changed {flaps} times or more within 30 minutes (any job)",
        ),
        _alert(
            name="GotthardRuleEvaluationFailures",
            expr=(
                "sum by (site, cluster, instance, rule_group) (\n"
                "  increase(prometheus_rule_evaluation_failures_total"
                f"{{{PROMETHEUS_JOB}}}[10m])\n) > 0"
            ),
            for_="15m",
            severity="critical",
            summary="Prometheus fails to evaluate rules.",
            description=(
                "Prometheus {{ $labels.instance }} (" + AT + ") failed "
                "{{ $value | humanize }} rule evaluations of group {{ $labels.rule_group }} "
                "in the last 10 minutes; the alerts of that group may never fire."
            ),
            expr_summary="rule evaluation failures in every 10 minutes for 15 minutes",
        ),
        _alert(
            name="GotthardAlertDeliveryFailing",
            expr=(
                "sum by (site, cluster, instance, integration) (\n"
                "  rate(alertmanager_notifications_failed_total"
                f"{{{ALERTMANAGER_JOB}}}[15m])\n)\n/\n"
                "sum by (site, cluster, instance, integration) (\n"
                f"  rate(alertmanager_notifications_total{{{ALERTMANAGER_JOB}}}[15m])\n)\n"
                f"> {num(failures)}"
            ),
            for_="15m",
            severity="warning",
            summary="Alertmanager fails to deliver notifications.",
            description=(
                "Alertmanager {{ $labels.instance }} (" + AT + ") failed "
                "{{ $value | humanizePercentage }} of its {{ $labels.integration }} "
                "notifications in the last 15 minutes."
            ),
            expr_summary=(
                f"more than {pct(failures)} of one integration's notifications failed "
                "(15-minute rates)"
            ),
        ),
        _alert(
            name="GotthardClockSkew",
            # the exporter reads its wall clock as the scrape starts; timestamp() is
            # Prometheus' time of that scrape: the difference is the skew, plus the
            # scrape's network latency (well under the threshold on a site network)
            expr=f"abs({EXPORTER_TIME} - timestamp({EXPORTER_TIME})) > {num(skew)}",
            for_="10m",
            severity="warning",
            summary="A host's clock differs from Prometheus' clock.",
            description=(
                "The clock of {{ $labels.instance }} (" + AT + ") is "
                "{{ $value | humanize }}s off the clock of Prometheus; munge credentials "
                "and the DR Lease depend on synchronised clocks."
            ),
            expr_summary=(
                f"exporter clock (`{EXPORTER_TIME}`) more than {num(skew * 1000)} ms off "
                "the scrape time"
            ),
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
        _alert(
            name="GotthardTLSCertificateExpiryImminent",
            expr=f"{CERTIFICATE_NOT_AFTER} - time() < {num(critical_left)}",
            for_="5m",
            severity="critical",
            summary="A TLS certificate Gotthard serves expires within a day, or has expired.",
            description=(
                "The certificate {{ $labels.instance }} serves on {{ $labels.listen }} "
                "(" + AT + ") has {{ $value | humanizeDuration }} left (negative: expired); "
                "scrapes and webhook calls over TLS fail once it has expired."
            ),
            expr_summary=(
                f"served certificate's notAfter within {duration(critical_left)}, or past"
            ),
        ),
    )
