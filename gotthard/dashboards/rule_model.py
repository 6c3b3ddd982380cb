"""What a Prometheus rule is here: recording and alerting rules, components, severities.

See :mod:`gotthard.dashboards.rules` for the conventions the rules follow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

#: Grafana dashboard uids, by slug of the dashboard title (``gotthard-`` + slug). The
#: dashboards area builds its dashboards with exactly these uids.
DASHBOARD_UIDS: Mapping[str, str] = {
    "site-overview": "gotthard-site-overview",
    "slurm-cluster": "gotthard-slurm-cluster",
    "gpu-fleet": "gotthard-gpu-fleet",
    "slingshot-network-health": "gotthard-slingshot-network-health",
    "lustre-storage": "gotthard-lustre-storage",
    "dr": "gotthard-dr",
    "security-compliance": "gotthard-security-compliance",
}

#: ``runbook_url`` is ``<base>/<AlertName>.md``; the default points at docs/runbooks/.
DEFAULT_RUNBOOK_BASE_URL = "https://gotthard.example.org/docs/runbooks"
#: ``dashboard_url`` is ``<base>/d/<uid>?var-site=..&var-cluster=..``.
DEFAULT_DASHBOARD_BASE_URL = "https://grafana.example.org"

#: Components in file order; each has one recording group and one alerting group.
COMPONENTS: tuple[str, ...] = ("gotthard", "slurm", "gpu", "slingshot", "lustre", "dr", "security")


def group_name(component: str, kind: Literal["recording", "alerts"]) -> str:
    """``gotthard-slurm.alerts``; Gotthard's own rules are ``gotthard-self.*``."""
    stem = "self" if component == "gotthard" else component
    return f"gotthard-{stem}.{kind}"


#: Components whose alerts are about one host and carry a ``node`` label.
NODE_COMPONENTS = ("gotthard", "gpu", "slingshot")
#: ``instance`` is ``host:port``; ``node`` is the host.
NODE_REGEX = "([^:]+)(?::[0-9]+)?"


@dataclass(frozen=True)
class RecordingRule:
    component: str
    record: str
    expr: str


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
    #: key of DASHBOARD_UIDS
    dashboard: str
    #: one line for docs/alerts.md: what the expression means
    expr_summary: str

    @property
    def promql(self) -> str:
        """The rule's expression as written to alerts.rules.yml.

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
        return (
            f"{base.rstrip('/')}/d/{uid}"
            "?var-site={{ $labels.site }}&var-cluster={{ $labels.cluster }}"
        )


def num(value: float) -> str:
    """A threshold as PromQL and people write it: 0.1, 100, 1e-6."""
    text = f"{value:g}"
    return text.replace("e-0", "e-").replace("e+0", "e+")


def regex_any(values: Iterable[str]) -> str:
    """A regex matching any of *values* (which hold no regex metacharacters)."""
    return "|".join(values)
