"""``gotthard rules thresholds``: every threshold, its value here, and what uses it.

Which alerts and panels use a threshold is found from the code, not listed by hand:
everything is built once at the current values and once more per threshold with that
threshold changed; the alerts and panels whose output changed use it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gotthard.monitoring import rules
from gotthard.monitoring.components import all_alerts, job
from gotthard.monitoring.dashboards.lint import iter_panels
from gotthard.monitoring.thresholds import ThresholdValues, num

if TYPE_CHECKING:
    from gotthard.config import Config
    from gotthard.monitoring.settings import MonitoringConfig


@dataclass(frozen=True)
class ThresholdUse:
    name: str
    default: float
    value: float
    unit: str
    description: str
    #: alert names
    alerts: list[str]
    #: ``<dashboard title> / <panel title>``
    panels: list[str]


def _alert_texts(values: ThresholdValues) -> dict[str, str]:
    return {rule.name: repr(rule) for rule in all_alerts(values)}


def _panel_texts(values: ThresholdValues) -> dict[str, str]:
    from gotthard.monitoring.dashboards import build  # grafanalib: only for this command

    return {
        f"{dash['title']} / {panel['title']}": json.dumps(panel, sort_keys=True)
        for dash in build.build_with(values)
        for panel in iter_panels(dash)
    }


def _changed(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    return [key for key, text in before.items() if after.get(key) != text]


def usage(values: ThresholdValues) -> list[ThresholdUse]:
    """Every threshold with its value in *values* and the alerts and panels using it."""
    alerts, panels = _alert_texts(values), _panel_texts(values)
    found = []
    for name, threshold in values.known.items():
        changed = values.overridden(name, threshold.perturbed(values[name]))
        found.append(
            ThresholdUse(
                name=name,
                default=threshold.default,
                value=values[name],
                unit=threshold.unit,
                description=threshold.description,
                alerts=_changed(alerts, _alert_texts(changed)),
                panels=_changed(panels, _panel_texts(changed)),
            )
        )
    return found


def render_text(uses: list[ThresholdUse]) -> str:
    lines = []
    for use in uses:
        mark = "" if use.value == use.default else f" (default {num(use.default)})"
        lines.append(f"{use.name} = {num(use.value)} {use.unit}{mark}: {use.description}")
        lines.append(f"  alerts: {', '.join(use.alerts) or '-'}")
        lines.append(f"  panels: {', '.join(use.panels) or '-'}")
    return "\n".join(lines) + "\n"


def markdown_table(uses: list[ThresholdUse]) -> str:
    """The threshold table of docs/alerts.md (a test keeps the page in step with this)."""
    lines = ["| Threshold | Default | Unit | Used by |", "|---|---|---|---|"]
    for use in uses:
        alerts = ", ".join(use.alerts) or (
            "findings of `gotthard job report` (docs/job.md)" if use.name in job.FINDINGS else ""
        )
        lines.append(f"| `{use.name}` | {num(use.default)} | {use.unit} | {alerts} |")
    return "\n".join(lines) + "\n"


def thresholds_report(monitoring: MonitoringConfig | None = None, fmt: str = "text") -> str:
    """The listing of ``gotthard rules thresholds`` as text or JSON."""
    uses = usage(rules.values_for(monitoring))
    if fmt == "json":
        return json.dumps([asdict(use) for use in uses], indent=2) + "\n"
    return render_text(uses)


def _cmd_thresholds(args: argparse.Namespace, cfg: Config) -> int:
    print(thresholds_report(cfg.monitoring, args.format), end="")
    return 0


def add_parser(commands: Any) -> None:
    """Register ``thresholds`` on the ``rules`` command's subparsers."""
    parser = commands.add_parser(
        "thresholds",
        help="list every threshold: default, current value, unit, alerts and panels",
        description="List every alert threshold with its default, its value under the "
        "site file's [monitoring.thresholds], its unit, and the alerts and dashboard "
        "panels that use it.",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(handler=_cmd_thresholds)
