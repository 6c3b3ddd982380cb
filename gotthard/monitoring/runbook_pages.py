"""The runbook pages, rendered from templates with the site's thresholds.

``gotthard/monitoring/runbooks/<Alert>.md.tmpl`` holds each alert's page; placeholders
take the current values, so a site that tunes ``[monitoring.thresholds]`` gets pages
that say what its alerts do. docs/runbooks/ is the render at the defaults (a test keeps
the two identical).

Placeholders (``<<...>>``):

* ``<<summary>>``, ``<<for>>``, ``<<promql>>``, ``<<source>>``: the alert's summary, its
  ``for`` duration, its expression as written to the rule file, and the module that
  defines it;
* ``<<automated_steps>>``: the ``Automated steps:`` line, what the runbook webhook does
  for the alert (from its action registry, :mod:`gotthard.runbooks.registry`);
* ``<<threshold>>`` or ``<<threshold|format>>``: a threshold's value, as PromQL writes it,
  or formatted: ``pct`` (``85%``), ``pts`` (percentage points, ``20``), ``ms`` (seconds
  as milliseconds), ``min`` and ``h`` (seconds as minutes or hours), ``dur`` (a
  Prometheus duration, ``30m``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gotthard import areas
from gotthard.monitoring import rules
from gotthard.monitoring.documents import write_files
from gotthard.monitoring.rule_model import AlertRule
from gotthard.monitoring.thresholds import duration, num, pct
from gotthard.runbooks.registry import automated_steps_line

if TYPE_CHECKING:
    from gotthard.monitoring.settings import MonitoringConfig

TEMPLATES = Path(__file__).parent / "runbooks"
SUFFIX = ".md.tmpl"
_PLACEHOLDER = re.compile(r"<<([a-z_0-9]+)(?:\|([a-z]+))?>>")
FORMATS: Mapping[str, Callable[[float], str]] = {
    "": num,
    "pct": pct,
    "pts": lambda ratio: num(round(ratio * 100, 6)),
    "ms": lambda seconds: num(round(seconds * 1000, 6)),
    "min": lambda seconds: num(seconds / 60),
    "h": lambda seconds: num(seconds / 3600),
    "dur": duration,
}


def template_names() -> list[str]:
    """The alerts that have a page template."""
    return sorted(path.name.removesuffix(SUFFIX) for path in TEMPLATES.glob(f"*{SUFFIX}"))


def render_page(template: str, rule: AlertRule, values: Mapping[str, float]) -> str:
    """*template* with its placeholders filled from *rule* and the threshold *values*."""
    fields = {
        "summary": rule.summary,
        "for": rule.for_,
        "promql": rule.promql,
        "source": areas.area(rule.component).component.replace(".", "/") + ".py",
        "automated_steps": automated_steps_line(rule.name),
    }

    def fill(match: re.Match[str]) -> str:
        name, fmt = match.group(1), match.group(2) or ""
        if name in fields and not fmt:
            return fields[name]
        if name not in values:
            raise KeyError(f"{rule.name}: unknown placeholder <<{match.group(0)[2:-2]}>>")
        return FORMATS[fmt](values[name])

    return _PLACEHOLDER.sub(fill, template)


def render_pages(monitoring: MonitoringConfig | None = None) -> dict[str, str]:
    """``<Alert>.md`` -> page text, for every alert the site has not disabled."""
    values = rules.values_for(monitoring)
    pages = {}
    for rule in rules.alerts(monitoring):
        template = (TEMPLATES / f"{rule.name}{SUFFIX}").read_text(encoding="utf-8")
        pages[f"{rule.name}.md"] = render_page(template, rule, values)
    return pages


def write_runbooks(out_dir: Path | str, monitoring: MonitoringConfig | None = None) -> list[Path]:
    """Write the pages into *out_dir* (created if missing); return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return write_files(out, render_pages(monitoring))
