"""Gotthard's Grafana dashboards: build them, and write them as current Grafana JSON.

The dashboards are defined with grafanalib, one module per area in
:mod:`gotthard.monitoring.boards`, from the helpers of :mod:`gotthard.monitoring.panels`;
they read the thresholds and recorded series of :mod:`gotthard.monitoring.components`, so
their threshold lines and colours follow the site's ``[monitoring.thresholds]``.
:mod:`gotthard.monitoring.schema` rewrites grafanalib's output into the JSON current
Grafana stores itself. This module is the entry point the CLI, the sandbox and the tests
use.

The output is deterministic: :func:`render` sorts keys, and panel ids come from
``auto_panel_ids`` in definition order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard

from gotthard.monitoring import deliver
from gotthard.monitoring.boards import (
    dr,
    exporter,
    gpu,
    lustre,
    overview,
    security,
    slingshot,
    slurm,
)
from gotthard.monitoring.rules import values_for
from gotthard.monitoring.schema import SCHEMA_VERSION, modernise
from gotthard.monitoring.shared import DASHBOARD_UIDS, TITLE_PREFIX, slug, uid_for
from gotthard.monitoring.thresholds import ThresholdValues

if TYPE_CHECKING:
    from gotthard.monitoring.settings import MonitoringConfig

__all__ = [
    "BUILDERS",
    "DASHBOARD_UIDS",
    "PROMETHEUS_BUILTIN_METRICS",
    "SCHEMA_VERSION",
    "TITLE_PREFIX",
    "build_dashboards",
    "build_with",
    "modernise",
    "render",
    "slug",
    "to_dict",
    "uid_for",
    "write_dashboards",
]

#: Series Prometheus itself produces for every target or rule.
PROMETHEUS_BUILTIN_METRICS = frozenset(
    {"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS"}
)

#: Every dashboard, in :data:`~gotthard.monitoring.shared.DASHBOARD_NAMES` order; each
#: takes the current threshold values.
BUILDERS: tuple[Callable[[ThresholdValues], Dashboard], ...] = (
    overview.site_overview,
    slurm.slurm_cluster,
    gpu.gpu_fleet,
    slingshot.slingshot_network,
    lustre.lustre_storage,
    dr.disaster_recovery,
    security.security_compliance,
    exporter.exporter_health,
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


def write_dashboards(
    out_dir: Path | str, *, monitoring: MonitoringConfig | None = None
) -> list[Path]:
    """Write ``<uid>.json`` for every dashboard into *out_dir* (created if missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return deliver.write(out, deliver.dashboard_documents("json", monitoring=monitoring))
