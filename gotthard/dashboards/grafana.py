"""Gotthard's Grafana dashboards: build them, and write them as current Grafana JSON.

The dashboards are defined with grafanalib, one module per area in
:mod:`gotthard.dashboards.boards`, from the helpers of :mod:`gotthard.dashboards.panels`;
:mod:`gotthard.dashboards.schema` rewrites grafanalib's output into the JSON current
Grafana stores itself. This module is the entry point the CLI, the sandbox and the tests
use.

The output is deterministic: :func:`render` sorts keys, and panel ids come from
``auto_panel_ids`` in definition order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard

from gotthard.dashboards.boards import (
    dr,
    exporter,
    gpu,
    lustre,
    overview,
    security,
    slingshot,
    slurm,
)
from gotthard.dashboards.panels import TITLE_PREFIX, slug, uid_for
from gotthard.dashboards.schema import SCHEMA_VERSION, modernise

__all__ = [
    "BUILDERS",
    "DASHBOARD_UIDS",
    "PLANNED_METRICS",
    "PROMETHEUS_BUILTIN_METRICS",
    "SCHEMA_VERSION",
    "TITLE_PREFIX",
    "build_dashboards",
    "modernise",
    "render",
    "slug",
    "to_dict",
    "uid_for",
    "write_dashboards",
]

#: Metric names the dashboards use from collectors that are not built yet, with the area
#: that will export them. Slurm, GPU, Slingshot and Lustre names are checked against the
#: real exporters instead (tests/dashboards); Prometheus' own series (``up``,
#: ``scrape_*``, ``ALERTS``) are built in. Label sets and label values assumed beyond the
#: planned metrics' descriptions are listed in docs/dashboards.md.
PLANNED_METRICS: dict[str, str] = {
    **dict.fromkeys(
        (
            "gotthard_dr_backup_last_success_timestamp_seconds",
            "gotthard_dr_backup_duration_seconds",
            "gotthard_dr_backups_total",
            "gotthard_dr_rpo_seconds",
            "gotthard_dr_drill_last_success",
            "gotthard_dr_drill_rto_seconds",
            "gotthard_dr_drill_rpo_seconds",
            "gotthard_dr_drill_last_timestamp_seconds",
            "gotthard_dr_site_healthy",
            "gotthard_dr_placement",
        ),
        "DR daemon",
    ),
    **dict.fromkeys(
        (
            "gotthard_kube_bench_checks",
            "gotthard_kube_bench_check_failed",
            "gotthard_policy_violations",
        ),
        "security baseline",
    ),
}
#: Series Prometheus itself produces for every target or rule.
PROMETHEUS_BUILTIN_METRICS = frozenset(
    {"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS"}
)

#: Every dashboard, in the order they are listed in docs/dashboards.md.
BUILDERS: tuple[Callable[[], Dashboard], ...] = (
    overview.site_overview,
    slurm.slurm_cluster,
    gpu.gpu_fleet,
    slingshot.slingshot_network,
    lustre.lustre_storage,
    dr.disaster_recovery,
    security.security_compliance,
    exporter.exporter_health,
)

#: Stable uids, for links from alerts (``dashboard_url``) and runbooks.
DASHBOARD_UIDS: dict[str, str] = {
    "overview": uid_for(overview.NAME),
    "slurm": uid_for(slurm.NAME),
    "gpu": uid_for(gpu.NAME),
    "slingshot": uid_for(slingshot.NAME),
    "lustre": uid_for(lustre.NAME),
    "dr": uid_for(dr.NAME),
    "security": uid_for(security.NAME),
    "exporters": uid_for(exporter.NAME),
}


def to_dict(dash: Dashboard) -> dict[str, Any]:
    """grafanalib object -> plain JSON-able dict in current Grafana's shape."""
    legacy = json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder))
    return modernise(legacy)


def build_dashboards() -> list[dict[str, Any]]:
    """Every dashboard as a dict, in :data:`BUILDERS` order."""
    return [to_dict(builder()) for builder in BUILDERS]


def render(dash: dict[str, Any]) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(dash, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_dashboards(out_dir: Path | str) -> list[Path]:
    """Write ``<uid>.json`` for every dashboard into *out_dir* (created if missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for dash in build_dashboards():
        path = out / f"{dash['uid']}.json"
        path.write_text(render(dash), encoding="utf-8")
        written.append(path)
    return written
