"""What a Prometheus rule is here: recording and alerting rules, components, severities.

See :mod:`gotthard.monitoring.rules` for the conventions the rules follow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from gotthard import areas
from gotthard.monitoring.shared import DASHBOARD_UIDS
from gotthard.monitoring.thresholds import Threshold, ThresholdValues, duration, num

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")
#: Who acts on an alert: the site's operators (the runbook webhook, pagers, tickets, by
#: severity), or the users whose jobs it is about (an efficiency finding: its own
#: Alertmanager receiver, never a pager; the ``audience`` label routes it).
Audience = Literal["operators", "users"]

#: Where a rule is evaluated, by where its data lives (docs/multisite.md):
#:
#: * ``site``: at each site Prometheus, from what that site scrapes; almost every rule.
#:   A fact about one site is judged where its data is, and goes on being judged while
#:   the other site or the link between them is down.
#: * ``global``: at the global evaluator (the sandbox's federating global Prometheus,
#:   Thanos Ruler over Thanos Query in production), for facts that only both sites'
#:   data together show, or data only the global view has (its federation targets).
#:   What a global rule reads must reach the global view (the deploy generator
#:   federates the series of every global rule).
Placement = Literal["site", "global"]
PLACEMENTS: tuple[Placement, ...] = ("site", "global")

#: ``runbook_url`` is ``<base>/<AlertName>.md``; the default points at docs/runbooks/.
DEFAULT_RUNBOOK_BASE_URL = "https://gotthard.example.org/docs/runbooks"
#: ``dashboard_url`` is ``<base>/d/<uid>?var-site=..&var-cluster=..``.
DEFAULT_DASHBOARD_BASE_URL = "https://grafana.example.org"

#: Components in file order, one per area of :data:`gotthard.areas.AREAS` (named as the
#: area); each has one recording group and one alerting group.
COMPONENTS: tuple[str, ...] = tuple(area.name for area in areas.AREAS)


#: How often a recording rule is evaluated:
#:
#: * ``evaluation``: at every evaluation interval (the scrape interval); what alerts
#:   read, and almost every record;
#: * ``slow``: in its component's slow group, at ``[monitoring] slow_rule_interval``
#:   (2 minutes unless set): records that read many series (one per job and target) to
#:   feed dashboards, where a point every few minutes is enough; no alert reads them.
Cadence = Literal["evaluation", "slow"]
CADENCES: tuple[Cadence, ...] = ("evaluation", "slow")
DEFAULT_SLOW_RULE_INTERVAL = "2m"


def group_name(
    component: str,
    kind: Literal["recording", "alerts"],
    placement: Placement = "site",
    cadence: Cadence = "evaluation",
) -> str:
    """``gotthard-slurm.alerts``; Gotthard's own rules are ``gotthard-self.*``; a
    component's rules for the global evaluator are ``gotthard-dr.global-alerts``, its
    slow records ``gotthard-lustre.slow-recording``."""
    if placement != "site":
        return f"gotthard-{component}.{placement}-{kind}"
    if cadence != "evaluation":
        return f"gotthard-{component}.{cadence}-{kind}"
    return f"gotthard-{component}.{kind}"


#: Components whose alerts are about one host and carry a ``node`` label.
NODE_COMPONENTS = ("self", "gpu", "slingshot")
#: ``instance`` is ``host:port``; ``node`` is the host.
NODE_REGEX = "([^:]+)(?::[0-9]+)?"


@dataclass(frozen=True)
class RecordingRule:
    component: str
    record: str
    expr: str
    #: how often it is evaluated (:data:`Cadence`); no alert may read a ``slow`` record
    cadence: Cadence = "evaluation"


#: How long a reading counts as the series' current one where a :class:`LastReading`
#: reads it: Prometheus' own lookback for an instant selector. A range over it, unlike an
#: instant selector, still sees the last reading once a staleness marker follows it, and
#: every reading taken between two evaluations.
RECENT = "5m"


@dataclass(frozen=True)
class LastReading:
    """The last reading of a per-device gauge within its alert's *lookback*, bad or good,
    also once the device's series stop (an exporter restart, a node down): the alert
    condition for a device that stays broken until it reads good again.

    ``last_over_time(<series>[lookback])`` says that directly, but reads every device's
    whole lookback at every evaluation. Instead, a device that reads decides by its
    recent reading (:data:`RECENT`), and one whose series stopped by two sparse records:
    the time of each bad reading (only broken devices have that series), and the time of
    each good reading of a device with a bad one within the lookback. Its last reading
    was bad while its last bad record is newer than its last good one. The records keep
    every label of the series. Missing data adds no record, so it neither fires nor
    resolves anything.
    """

    component: str
    #: ``level`` of the records' names (:mod:`gotthard.monitoring.rules`): the labels that
    #: identify one series of *series*
    level: str
    #: the selector of the readings, ``gotthard_gpu_remapped_rows{state="failure"}``
    series: str
    #: what a bad and a good reading are, each as (its name in its record's name, the
    #: comparison that selects it): ``("failure", "> 0")``, ``("no_failure", "<= 0")``
    bad: tuple[str, str]
    good: tuple[str, str]
    lookback: Threshold

    @property
    def metric(self) -> str:
        return self.series.partition("{")[0]

    @property
    def bad_record(self) -> str:
        """``<level>:<metric>:<bad>_timestamp``: the time of each bad reading."""
        return f"{self.level}:{self.metric}:{self.bad[0]}_timestamp"

    @property
    def good_record(self) -> str:
        return f"{self.level}:{self.metric}:{self.good[0]}_timestamp"

    @property
    def recent(self) -> str:
        return f"last_over_time({self.series}[{RECENT}])"

    def records(self, values: ThresholdValues) -> tuple[RecordingRule, RecordingRule]:
        """The bad and the good readings' times, in this order (the second reads the first)."""
        lookback = duration(values[self.lookback])
        return (
            RecordingRule(
                self.component, self.bad_record, f"timestamp({self.recent} {self.bad[1]})"
            ),
            RecordingRule(
                self.component,
                self.good_record,
                f"timestamp({self.recent} {self.good[1]})"
                f"\nand\nlast_over_time({self.bad_record}[{lookback}])",
            ),
        )

    def expr(self, values: ThresholdValues) -> str:
        """The series whose last reading within the lookback is bad: recent readings as
        they are, the others by the records (their value: the last bad reading's time)."""
        lookback = duration(values[self.lookback])
        last_bad = f"last_over_time({self.bad_record}[{lookback}])"
        last_good = f"last_over_time({self.good_record}[{lookback}])"
        return (
            f"{self.recent} {self.bad[1]}\nor\n(\n  {last_bad}\n"
            f"  unless\n  {last_good} > {last_bad}\n  unless\n  {self.recent}\n)"
        )


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
    #: key of :data:`gotthard.monitoring.shared.DASHBOARD_UIDS`
    dashboard: str
    #: one line for docs/alerts.md: what the expression means
    expr_summary: str
    #: For alerts whose runbook undoes its action when the alert resolves (drain/resume,
    #: cordon/uncordon): PromQL that returns a series only once the thing is healthy
    #: again, with ``$labels.X`` placeholders (outside ``{{ }}``: Prometheus leaves them
    #: as they are, and the runbook webhook fills them in, escaped). It travels as the
    #: ``repair_query`` annotation, so the webhook can tell a repair from a stale series.
    repair_query: str = ""
    #: The labels the ``dashboard_url`` passes as dashboard variables (``var-<label>``);
    #: only labels the alert's series carry.
    url_labels: tuple[str, ...] = ("site", "cluster")
    #: Where it is evaluated (:data:`Placement`): its component's group at each site
    #: Prometheus, or its component's global group at the global evaluator.
    placement: Placement = "site"
    #: Who acts on it (:data:`Audience`); ``users`` adds the label ``audience="users"``.
    audience: Audience = "operators"

    @property
    def promql(self) -> str:
        """The rule's expression as written to its rule file.

        Alerts about one host (components in NODE_COMPONENTS) add a ``node`` label, the
        ``instance`` without its port, for the runbook webhook to act on.
        """
        if self.component not in NODE_COMPONENTS:
            return self.expr
        inner = self.expr.replace("\n", "\n  ")
        return f'label_replace(\n  {inner},\n  "node", "$1", "instance", "{NODE_REGEX}"\n)'

    def runbook_url(self, base: str = DEFAULT_RUNBOOK_BASE_URL) -> str:
        return f"{base.rstrip('/')}/{self.name}.md"

    def dashboard_url(self, base: str = DEFAULT_DASHBOARD_BASE_URL) -> str:
        uid = DASHBOARD_UIDS[self.dashboard]
        variables = "&".join(f"var-{label}={{{{ $labels.{label} }}}}" for label in self.url_labels)
        return f"{base.rstrip('/')}/d/{uid}" + (f"?{variables}" if variables else "")

    def annotations(
        self,
        runbook_base: str = DEFAULT_RUNBOOK_BASE_URL,
        dashboard_base: str = DEFAULT_DASHBOARD_BASE_URL,
    ) -> dict[str, str]:
        """The annotations written to the rule file, in their order there."""
        notes = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": self.runbook_url(runbook_base),
            "dashboard_url": self.dashboard_url(dashboard_base),
        }
        if self.repair_query:
            notes["repair_query"] = self.repair_query
        return notes


def on_condition(
    alert: Callable[..., AlertRule],
    name: str,
    condition: str,
    for_: str,
    severity: Severity,
    summary: str,
    description: str,
    note: str = "",
    expr_summary: str = "",
) -> AlertRule:
    """Alert *name* (built by *alert*, a component's partial :class:`AlertRule`) on a
    plain *condition*. Its line in docs/alerts.md is *expr_summary*, or else quotes the
    condition, followed by *note*, so that the expression and its summary cannot disagree."""
    return alert(
        name=name,
        expr=condition,
        expr_summary=expr_summary or f"`{condition}`{note}",
        for_=for_,
        severity=severity,
        summary=summary,
        description=description,
    )


def above(
    alert: Callable[..., AlertRule],
    name: str,
    series: str,
    limit: float,
    for_: str,
    severity: Severity,
    summary: str,
    description: str,
    expr_summary: str,
) -> AlertRule:
    """Alert *name* (see :func:`on_condition`) on *series* above the threshold value
    *limit*."""
    condition = f"{series} > {num(limit)}"
    return on_condition(
        alert, name, condition, for_, severity, summary, description, expr_summary=expr_summary
    )


def expiring(
    alert: Callable[..., AlertRule],
    name: str,
    expiry: str,
    notice: float,
    summary: str,
    description: str,
    what: str,
    note: str = "",
) -> AlertRule:
    """Alert *name* (see :func:`on_condition`), a warning after 15 minutes, while the
    timestamp *expiry* is less than *notice* seconds away, or past; docs/alerts.md reads
    "*what* within N days", followed by *note*."""
    condition = f"{expiry} - time() < {num(notice)}"
    within = f"{what} within {num(notice / 86400)} days{note}"
    return on_condition(
        alert, name, condition, "15m", "warning", summary, description, expr_summary=within
    )


def regex_any(values: Iterable[str]) -> str:
    """A regex matching any of *values* (which hold no regex metacharacters)."""
    return "|".join(values)


#: Where an alert fires: every series carries the site and cluster target labels.
AT = "{{ $labels.site }}/{{ $labels.cluster }}"
#: The subjects descriptions start from: a host, a GPU, a Slingshot NIC, a Lustre file
#: system and one of its targets.
HOST = "{{ $labels.instance }} in " + AT
GPU = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on " + HOST
LINK = "{{ $labels.device }} on " + HOST
FS = "{{ $labels.fs }} in " + AT
TARGET = "{{ $labels.target }} of " + FS
