"""Gotthard's Grafana dashboards: build them as current Grafana JSON.

The dashboards are defined with grafanalib, one module per area in
:mod:`gotthard.monitoring.dashboards.boards`, from the helpers of
:mod:`~gotthard.monitoring.dashboards.panels`; the registry of areas
(:data:`gotthard.areas.DASHBOARDS`) names them and their builders. They read the
thresholds and recorded series of :mod:`gotthard.monitoring.components`, so their
threshold lines and colours follow the site's ``[monitoring.thresholds]``.
:mod:`~gotthard.monitoring.dashboards.schema` rewrites grafanalib's output into the JSON
current Grafana stores itself. Writing them in a delivery format is
:mod:`gotthard.monitoring.deliver`'s.

The output is deterministic: :func:`render` sorts keys, and panel ids come from
``auto_panel_ids`` in definition order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard

from gotthard import areas
from gotthard.monitoring.dashboards.schema import SCHEMA_VERSION, modernise
from gotthard.monitoring.rules import values_for
from gotthard.monitoring.thresholds import ThresholdValues

if TYPE_CHECKING:
    from gotthard.monitoring.settings import MonitoringConfig

__all__ = [
    "BUILDERS",
    "PROMETHEUS_BUILTIN_METRICS",
    "SCHEMA_VERSION",
    "build_dashboards",
    "build_with",
    "render",
    "to_dict",
]

#: Series Prometheus itself produces for every target or rule.
PROMETHEUS_BUILTIN_METRICS = frozenset(
    {"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS"}
)

#: Every dashboard's builder, in :data:`gotthard.areas.DASHBOARDS` order; each takes the
#: current threshold values.
BUILDERS: tuple[Callable[[ThresholdValues], Dashboard], ...] = tuple(
    areas.load(dashboard.builder) for dashboard in areas.DASHBOARDS
)


def to_dict(dash: Dashboard) -> dict[str, Any]:
    """grafanalib object -> plain JSON-able dict in current Grafana's shape."""
    legacy = json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder))
    return modernise(legacy)


def build_with(values: ThresholdValues) -> list[dict[str, Any]]:
    """Every dashboard as a dict, at the threshold *values*."""
    return [to_dict(builder(values)) for builder in BUILDERS]


def build_dashboards(monitoring: MonitoringConfig | None = None) -> list[dict[str, Any]]:
    """Every dashboard as a dict, in :data:`BUILDERS` order, at the site's thresholds."""
    return build_with(values_for(monitoring))


def render(dash: dict[str, Any]) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(dash, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
