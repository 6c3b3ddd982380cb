"""Gotthard's Grafana dashboards, defined with grafanalib.

grafanalib 0.7.1 emits Grafana 5-era JSON (``schemaVersion`` 12: ``rows``, ``span``,
datasource names as plain strings, targets with ``step``/``intervalFactor``, bar gauges
with ``options.fieldOptions``). :func:`modernise` rewrites that into the shape current
Grafana stores itself (``schemaVersion`` :data:`SCHEMA_VERSION`): datasource references
``{"type": "prometheus", "uid": "${datasource}"}``, ``gridPos`` on every panel, units in
``fieldConfig.defaults.unit``, and only the keys Grafana's dashboard schema knows.

Conventions (checked by :mod:`gotthard.dashboards.lint`):

* every dashboard has a ``datasource`` variable (type prometheus) and ``site`` and
  ``cluster`` variables; every selector in every query filters on
  ``site=~"$site", cluster=~"$cluster"`` (both are target labels added by Prometheus'
  scrape configuration, never by an exporter);
* ``rate``/``irate``/``increase`` use ``[$__rate_interval]``;
* every panel has a unit and is a timeseries, stat, table or bargauge;
* uids are ``gotthard-<slug of the name>``, at most 40 characters.

The output is deterministic: :func:`render` sorts keys, and panel ids come from
``auto_panel_ids`` in definition order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import attr
from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    TABLE_TARGET_FORMAT,
    TIME_SERIES_TARGET_FORMAT,
    BarGauge,
    Dashboard,
    GridPos,
    Repeat,
    Stat,
    Table,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

#: Schema version written into the dashboards: Grafana 10.3/10.4 LTS and 11.0-11.2 store
#: 39; later versions (11.3+, 12.x) migrate 39 forward on load. See docs/dashboards.md.
SCHEMA_VERSION = 39
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
UID_PREFIX = "gotthard-"
UID_MAX_LENGTH = 40
UID_PATTERN = re.compile(r"^gotthard-[a-z0-9]+(?:-[a-z0-9]+)*$")
TITLE_PREFIX = "Gotthard / "
TAG = "gotthard"
#: The filter every selector carries. Both labels are scrape-time target labels.
SITE_CLUSTER = 'site=~"$site", cluster=~"$cluster"'
RATE = "[$__rate_interval]"
REF_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

#: Metric names the dashboards use from collectors that are not built yet, with the issue
#: that names them. Slurm, GPU, Slingshot and Lustre names are checked against the real
#: exporters instead (tests/dashboards); Prometheus' own series (``up``, ``scrape_*``,
#: ``ALERTS``) are built in. Label sets and label values assumed beyond the issues' text
#: are listed in docs/dashboards.md.
PLANNED_METRICS: dict[str, str] = {
    # issue 7: DR daemon
    "gotthard_dr_backup_last_success_timestamp_seconds": "issue 7 (dr)",
    "gotthard_dr_backup_duration_seconds": "issue 7 (dr)",
    "gotthard_dr_backups_total": "issue 7 (dr)",
    "gotthard_dr_rpo_seconds": "issue 7 (dr)",
    "gotthard_dr_drill_last_success": "issue 7 (dr)",
    "gotthard_dr_drill_rto_seconds": "issue 7 (dr)",
    "gotthard_dr_drill_rpo_seconds": "issue 7 (dr)",
    "gotthard_dr_drill_last_timestamp_seconds": "issue 7 (dr)",
    "gotthard_dr_site_healthy": "issue 7 (dr)",
    "gotthard_dr_placement": "issue 7 (dr)",
    # issue 8: security baseline
    "gotthard_kube_bench_checks": "issue 8 (security)",
    "gotthard_kube_bench_check_failed": "issue 8 (security)",
    "gotthard_policy_violations": "issue 8 (security)",
}
#: Series Prometheus itself produces for every target or rule.
PROMETHEUS_BUILTIN_METRICS = frozenset(
    {"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS"}
)


# --------------------------------------------------------------------------------------
# PromQL helpers
# --------------------------------------------------------------------------------------


def eq(label: str, value: str) -> str:
    return f'{label}="{value}"'


def rx(label: str, value: str) -> str:
    return f'{label}=~"{value}"'


def sel(metric: str, *matchers: str) -> str:
    """``metric{site=~"$site", cluster=~"$cluster", <matchers>}``."""
    return metric + "{" + ", ".join((SITE_CLUSTER, *matchers)) + "}"


def rate(metric: str, *matchers: str, fn: str = "rate") -> str:
    """``rate(metric{...}[$__rate_interval])`` (or ``increase``/``irate`` with *fn*)."""
    return f"{fn}({sel(metric, *matchers)}{RATE})"


def zero_if_none(counted: str, by: str, base: str) -> str:
    """``count by (by) (counted) or 0 * count by (by) (base)``.

    A count of bad things is empty, not 0, when there are none; ``or vector(0)`` would
    hide a typo'd metric name. This keeps the labels and still needs *base* to exist.
    """
    grouping = f" by ({by})" if by else ""
    return f"count{grouping} ({counted}) or 0 * count{grouping} ({base})"


def owner_join(expr: str) -> str:
    """Add ``user``, ``account`` and ``partition`` of the Slurm job to a ``job_id`` result.

    ``slurm_job_info`` comes from the controller's exporter (another ``instance``), so the
    match is on ``cluster`` and ``job_id`` only; ``max by`` first collapses duplicates
    from redundant exporters so that the right-hand side is unique per job.
    """
    owners = "max by (cluster, job_id, user, account, partition) (" + sel("slurm_job_info") + ")"
    return f"({expr}) * on(cluster, job_id) group_left(user, account, partition) {owners}"


#: Labels that identify one whole GPU across the fleet (``instance`` is the node's
#: exporter, ``gpu`` the NVML index, ``uuid`` the board).
GPU_KEY = "site, cluster, instance, gpu, uuid"


def per_gpu_job(metric: str, *, mig: bool = False, instance: bool = True) -> str:
    """``gpu_job_info * on(<gpu key>) group_left <metric>``: one series per (GPU, job).

    ``gpu_job_info`` is the "many" side: a GPU shared by two jobs (or two MIG
    instances) has two info series but one ``gpu_utilization_ratio``. The reverse,
    ``metric * on(...) group_left(job_id) gpu_job_info``, fails with "many-to-many
    matching" as soon as a GPU holds two jobs. MIG-aware metrics also match on
    ``gpu_instance`` (empty, i.e. absent, for a whole GPU).
    """
    key = GPU_KEY + (", gpu_instance" if mig else "")
    node = ('instance=~"$instance"',) if instance else ()
    return f"{sel('gpu_job_info', *node)} * on({key}) group_left {sel(metric, *node)}"


def ost_max(metric: str, *, fs: bool = True) -> str:
    """One value per OST: the same OST is reported by its OSS and by every client's osc."""
    matchers = (rx("fs", "$fs"),) if fs else ()
    inner = sel(metric, *matchers, rx("component", "ost|osc"))
    return f"max by (site, cluster, fs, target) ({inner})"


def ost_fill(*, fs: bool = True) -> str:
    """OST fill as ``lfs df`` computes Use%: used / (used + available), used = total - free."""
    available = ost_max("lustre_target_available_bytes", fs=fs)
    capacity = ost_max("lustre_target_capacity_bytes", fs=fs)
    free = ost_max("lustre_target_free_bytes", fs=fs)
    return f"(1 - {available} / ({capacity} - {free} + {available}))"


# --------------------------------------------------------------------------------------
# Panels
# --------------------------------------------------------------------------------------

UP_DOWN: dict[str, Any] = {
    "type": "value",
    "options": {
        "0": {"color": "red", "index": 0, "text": "down"},
        "1": {"color": "green", "index": 1, "text": "up"},
    },
}
PASS_FAIL: dict[str, Any] = {
    "type": "value",
    "options": {
        "0": {"color": "red", "index": 0, "text": "failed"},
        "1": {"color": "green", "index": 1, "text": "passed"},
    },
}
HEALTHY: dict[str, Any] = {
    "type": "value",
    "options": {
        "0": {"color": "red", "index": 0, "text": "unhealthy"},
        "1": {"color": "green", "index": 1, "text": "healthy"},
    },
}
#: Thresholds for "any is bad": green at 0, red from 1.
BAD_FROM_ONE: tuple[tuple[float, str], ...] = ((1.0, "red"),)


@dataclass(frozen=True)
class Query:
    """One panel query. *unit*, *mappings* and *thresholds* override the panel's for this
    query only (``byFrameRefID``, or the value column in a table); *name* is the column
    title in a table."""

    expr: str
    legend: str = ""
    unit: str = ""
    name: str = ""
    mappings: tuple[dict[str, Any], ...] = field(default=())
    thresholds: tuple[tuple[float, str], ...] = field(default=())


def _steps(thresholds: Iterable[tuple[float, str]]) -> list[dict[str, Any]]:
    return [{"color": "green", "value": None}] + [
        {"color": color, "value": value} for value, color in thresholds
    ]


def _targets(queries: Sequence[Query], *, instant: bool, table: bool) -> list[Target]:
    return [
        Target(
            expr=query.expr,
            legendFormat=query.legend,
            refId=REF_IDS[index],
            instant=instant,
            format=TABLE_TARGET_FORMAT if table else TIME_SERIES_TARGET_FORMAT,
            datasource=DATASOURCE,
        )
        for index, query in enumerate(queries)
    ]


def _overrides(queries: Sequence[Query], *, table: bool) -> list[dict[str, Any]]:
    overrides = []
    for index, query in enumerate(queries):
        ref = REF_IDS[index]
        properties: list[dict[str, Any]] = []
        if table and query.name:
            properties.append({"id": "displayName", "value": query.name})
        if query.unit:
            properties.append({"id": "unit", "value": query.unit})
        if query.mappings:
            properties.append({"id": "mappings", "value": list(query.mappings)})
        if query.thresholds:
            properties.append(
                {
                    "id": "thresholds",
                    "value": {"mode": "absolute", "steps": _steps(query.thresholds)},
                }
            )
        if not properties:
            continue
        if table:
            column = "Value" if len(queries) == 1 else f"Value #{ref}"
            matcher = {"id": "byName", "options": column}
        else:
            matcher = {"id": "byFrameRefID", "options": ref}
        overrides.append({"matcher": matcher, "properties": properties})
    return overrides


def timeseries(
    title: str,
    unit: str,
    *queries: Query,
    description: str = "",
    stack: bool = False,
    minimum: int | None = None,
    maximum: int | None = None,
) -> TimeSeries:
    return TimeSeries(
        title=title,
        description=description or None,
        dataSource=DATASOURCE,
        targets=_targets(queries, instant=False, table=False),
        unit=unit,
        fillOpacity=20 if stack else 0,
        stacking={"group": "A", "mode": "normal"} if stack else {"group": "A", "mode": "none"},
        legendDisplayMode="table",
        legendPlacement="bottom",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        valueMin=minimum,
        valueMax=maximum,
        overrides=_overrides(queries, table=False),
        thresholds=_steps(()),
    )


def stat(
    title: str,
    unit: str,
    *queries: Query,
    description: str = "",
    thresholds: tuple[tuple[float, str], ...] = (),
    mappings: tuple[dict[str, Any], ...] = (),
    repeat: str = "",
) -> Stat:
    return Stat(
        title=title,
        description=description or None,
        dataSource=DATASOURCE,
        targets=_targets(queries, instant=True, table=False),
        format=unit,
        graphMode="none",
        colorMode="value",
        reduceCalc="lastNotNull",
        textMode="value_and_name" if len(queries) > 1 else "auto",
        noValue="no data",
        mappings=list(mappings),
        overrides=_overrides(queries, table=False),
        thresholds=_steps(thresholds),
        repeat=Repeat(direction="h", variable=repeat, maxPerRow=2) if repeat else Repeat(),
    )


def table(
    title: str,
    unit: str,
    *queries: Query,
    description: str = "",
    hide: Sequence[str] = ("Time",),
    sort_by: str = "",
) -> Table:
    transformations: list[dict[str, Any]] = []
    if len(queries) > 1:
        transformations.append({"id": "merge", "options": {}})
    transformations.append(
        {
            "id": "organize",
            "options": {"excludeByName": dict.fromkeys(hide, True), "renameByName": {}},
        }
    )
    panel = Table(
        title=title,
        description=description or None,
        dataSource=DATASOURCE,
        targets=_targets(queries, instant=True, table=True),
        unit=unit,
        filterable=True,
        overrides=_overrides(queries, table=True),
        transformations=transformations,
        thresholds=_steps(()),
    )
    if sort_by:
        panel = attr.evolve(
            panel, extraJson={"options": {"sortBy": [{"desc": True, "displayName": sort_by}]}}
        )
    return panel


def bargauge(
    title: str,
    unit: str,
    *queries: Query,
    description: str = "",
    minimum: float = 0,
    maximum: float | None = None,
    thresholds: tuple[tuple[float, str], ...] = (),
) -> BarGauge:
    return BarGauge(
        title=title,
        description=description or None,
        dataSource=DATASOURCE,
        targets=_targets(queries, instant=True, table=False),
        format=unit,
        min=minimum,
        max=maximum,
        calc="lastNotNull",
        displayMode="gradient",
        orientation="horizontal",
        thresholds=_steps(thresholds),
    )


class Board:
    """Lays panels out left to right on Grafana's 24-column grid, wrapping as needed."""

    def __init__(self) -> None:
        self.panels: list[Any] = []
        self._x = 0
        self._y = 0
        self._row_height = 0

    def add(self, panel: Any, w: int = 12, h: int = 8, *, alone: bool = False) -> None:
        """Place *panel*; *alone* keeps the rest of its row free (for repeated panels)."""
        if self._x + w > 24 or (alone and self._x):
            self.newline()
        self.panels.append(attr.evolve(panel, gridPos=GridPos(h=h, w=w, x=self._x, y=self._y)))
        self._x += w
        self._row_height = max(self._row_height, h)
        if alone:
            self.newline()

    def newline(self) -> None:
        if self._x:
            self._y += self._row_height
            self._x = 0
            self._row_height = 0


# --------------------------------------------------------------------------------------
# Variables and dashboards
# --------------------------------------------------------------------------------------


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def uid_for(name: str) -> str:
    uid = UID_PREFIX + slug(name)
    if len(uid) > UID_MAX_LENGTH:
        raise ValueError(f"dashboard uid {uid!r} is longer than {UID_MAX_LENGTH} characters")
    return uid


def query_variable(
    name: str, label: str, query: str, *, multi: bool = True, include_all: bool = True
) -> Template:
    return Template(
        name=name,
        label=label,
        query=query,
        dataSource=DATASOURCE,
        multi=multi,
        includeAll=include_all,
        refresh=2,  # on time range change
        sort=1,
        default="$__all" if include_all else None,
    )


def base_variables() -> list[Template]:
    return [
        Template(
            name="datasource",
            label="Data source",
            query="prometheus",
            type="datasource",
            refresh=1,
        ),
        query_variable("site", "Site", "label_values(up, site)"),
        query_variable("cluster", "Cluster", 'label_values(up{site=~"$site"}, cluster)'),
    ]


def dashboard(
    name: str,
    description: str,
    tags: Sequence[str],
    board: Board,
    variables: Sequence[Template] = (),
) -> Dashboard:
    return Dashboard(
        title=TITLE_PREFIX + name,
        uid=uid_for(name),
        description=description,
        tags=[TAG, *tags],
        templating=Templating(list=[*base_variables(), *variables]),
        panels=board.panels,
        time=Time("now-6h", "now"),
        refresh="1m",
        timezone="browser",
        graphTooltip=1,
        editable=True,
    ).auto_panel_ids()


# --------------------------------------------------------------------------------------
# 1. Site overview
# --------------------------------------------------------------------------------------


def site_overview() -> Dashboard:
    board = Board()
    ratio = "percentunit"
    board.add(
        stat(
            "Slurm — $site",
            "short",
            Query(f"min({sel('slurm_up')})", "controller", unit="none", mappings=(UP_DOWN,)),
            Query(
                f"sum({sel('slurm_node_cpus', eq('state', 'alloc'))}) / "
                f"sum({sel('slurm_node_cpus', eq('state', 'total'))})",
                "CPUs allocated",
                unit=ratio,
            ),
            Query(
                f"sum({sel('slurm_node_gpus', eq('state', 'alloc'))}) / "
                f"sum({sel('slurm_node_gpus', eq('state', 'total'))})",
                "GPUs allocated",
                unit=ratio,
            ),
            Query(f"sum({sel('slurm_jobs', eq('state', 'pending'))})", "jobs pending"),
            Query(
                zero_if_none(
                    sel("slurm_node_info", 'state=~".*(down|drain|fail).*"'),
                    "",
                    sel("slurm_node_info"),
                ),
                "nodes down or draining",
                thresholds=BAD_FROM_ONE,
            ),
            description="Controller reachability, allocation of CPUs and GPUs over all "
            "nodes, pending backlog, and nodes that cannot take work.",
            repeat="site",
        ),
        w=12,
        h=5,
        alone=True,
    )
    board.add(
        stat(
            "GPUs — $site",
            "short",
            Query(f"avg({sel('gpu_utilization_ratio')})", "mean utilisation", unit=ratio),
            Query(f"count({sel('gpu_info')})", "GPUs"),
            Query(
                zero_if_none(
                    sel("gpu_health", 'gpu_instance=""') + " == 0",
                    "",
                    sel("gpu_health", 'gpu_instance=""'),
                ),
                "unhealthy",
                thresholds=BAD_FROM_ONE,
            ),
            Query(f"sum({sel('gpu_power_watts')})", "power", unit="watt"),
            repeat="site",
        ),
        w=12,
        h=5,
        alone=True,
    )
    board.add(
        stat(
            "Slingshot — $site",
            "short",
            Query(
                zero_if_none(sel("slingshot_link_up") + " == 0", "", sel("slingshot_link_up")),
                "links down",
                thresholds=BAD_FROM_ONE,
            ),
            Query(
                zero_if_none(
                    sel("slingshot_link_healthy") + " == 0", "", sel("slingshot_link_healthy")
                ),
                "links unhealthy",
                thresholds=BAD_FROM_ONE,
            ),
            Query(
                f"sum({sel('slingshot_link_restarts_recent', eq('window', '1h'))})",
                "link restarts (1h)",
            ),
            Query(
                f"sum({rate('slingshot_fec_codewords_total', eq('type', 'uncorrected'))})",
                "uncorrected FEC",
                unit="cps",
            ),
            repeat="site",
        ),
        w=12,
        h=5,
        alone=True,
    )
    fill = ost_fill(fs=False)
    board.add(
        stat(
            "Lustre — $site",
            ratio,
            Query(f"max({fill})", "fullest OST", thresholds=((0.85, "orange"), (0.9, "red"))),
            Query(
                f"max(max by (fs) ({fill}) - min by (fs) ({fill}))",
                "OST fill spread",
                thresholds=((0.2, "orange"),),
            ),
            Query(
                f"sum({rate('lustre_operations_total', eq('component', 'mdt'))})",
                "metadata ops",
                unit="ops",
            ),
            repeat="site",
        ),
        w=12,
        h=5,
        alone=True,
    )
    board.add(
        stat(
            "DR — $site",
            "s",
            Query(
                f"min({sel('gotthard_dr_site_healthy')})",
                "site",
                unit="none",
                mappings=(HEALTHY,),
            ),
            Query(
                f"max(time() - {sel('gotthard_dr_backup_last_success_timestamp_seconds')})",
                "oldest backup",
            ),
            Query(
                f"min({sel('gotthard_dr_drill_last_success')})",
                "last drills",
                unit="none",
                mappings=(PASS_FAIL,),
            ),
            Query(f"max({sel('gotthard_dr_drill_rto_seconds')})", "worst drill RTO"),
            repeat="site",
        ),
        w=12,
        h=5,
        alone=True,
    )
    board.add(
        stat(
            "Compliance — $site",
            "short",
            Query(
                f"sum({sel('gotthard_kube_bench_checks', rx('status', '(?i)fail'))})",
                "kube-bench failed",
                thresholds=BAD_FROM_ONE,
            ),
            Query(
                f"sum({sel('gotthard_kube_bench_checks', rx('status', '(?i)pass'))}) / "
                f"sum({sel('gotthard_kube_bench_checks', rx('status', '(?i)pass|fail'))})",
                "kube-bench passing",
                unit=ratio,
            ),
            Query(
                f"sum({sel('gotthard_policy_violations')})",
                "policy violations",
                thresholds=BAD_FROM_ONE,
            ),
            repeat="site",
        ),
        w=12,
        h=5,
        alone=True,
    )
    board.add(
        timeseries(
            "Slurm allocation by site",
            ratio,
            Query(
                f"sum by (site) ({sel('slurm_node_cpus', eq('state', 'alloc'))}) / "
                f"sum by (site) ({sel('slurm_node_cpus', eq('state', 'total'))})",
                "CPUs {{site}}",
            ),
            Query(
                f"sum by (site) ({sel('slurm_node_gpus', eq('state', 'alloc'))}) / "
                f"sum by (site) ({sel('slurm_node_gpus', eq('state', 'total'))})",
                "GPUs {{site}}",
            ),
            minimum=0,
            maximum=1,
        )
    )
    board.add(
        timeseries(
            "GPU utilisation by site",
            ratio,
            Query(f"avg by (site) ({sel('gpu_utilization_ratio')})", "{{site}}"),
            minimum=0,
            maximum=1,
        )
    )
    board.add(
        timeseries(
            "Slingshot errors by site",
            "cps",
            Query(
                "sum by (site) ("
                + rate("slingshot_fec_codewords_total", eq("type", "uncorrected"))
                + ")",
                "uncorrected FEC {{site}}",
            ),
            Query(
                f"sum by (site) ({rate('slingshot_timeouts_total')})",
                "retransmission timeouts {{site}}",
            ),
        )
    )
    board.add(
        timeseries(
            "Lustre fullest OST by site",
            ratio,
            Query(f"max by (site) ({fill})", "{{site}}"),
            minimum=0,
            maximum=1,
        )
    )
    board.add(
        table(
            "Firing alerts",
            "none",
            Query(
                "sum by (site, cluster, alertname, severity) ("
                + sel("ALERTS", 'alertstate="firing"')
                + ")",
                name="firing",
            ),
            description="Alerts firing now (ALERTS series of the rules in Prometheus).",
            sort_by="severity",
        ),
        w=24,
        h=8,
    )
    return dashboard(
        "Site overview",
        "Zurich and Lugano side by side: Slurm, GPUs, Slingshot, Lustre, DR and compliance.",
        ("overview",),
        board,
    )


# --------------------------------------------------------------------------------------
# 2. Slurm cluster
# --------------------------------------------------------------------------------------


def slurm_cluster() -> Dashboard:
    part = 'partition=~"$partition"'
    board = Board()
    board.add(
        stat("Controller", "none", Query(sel("slurm_up"), "{{cluster}}"), mappings=(UP_DOWN,)),
        w=4,
        h=4,
    )
    board.add(
        stat(
            "Probes",
            "none",
            Query(sel("slurm_probe_success"), "{{cluster}} {{op}}"),
            mappings=(PASS_FAIL,),
            description="scontrol ping and sbatch --test-only from the exporter.",
        ),
        w=4,
        h=4,
    )
    board.add(
        stat(
            "Running jobs",
            "short",
            Query(f"sum({sel('slurm_jobs', eq('state', 'running'), part)})", "running"),
        ),
        w=4,
        h=4,
    )
    board.add(
        stat(
            "Pending jobs",
            "short",
            Query(f"sum({sel('slurm_jobs', eq('state', 'pending'), part)})", "pending"),
        ),
        w=4,
        h=4,
    )
    board.add(
        stat(
            "Nodes down or draining",
            "short",
            Query(
                zero_if_none(
                    sel("slurm_node_info", 'state=~".*(down|drain|fail).*"'),
                    "",
                    sel("slurm_node_info"),
                ),
                "nodes",
            ),
            thresholds=BAD_FROM_ONE,
        ),
        w=4,
        h=4,
    )
    board.add(
        stat(
            "Main scheduler cycle",
            "s",
            Query(f"max({sel('slurm_scheduler_cycle_last_seconds')})", "last cycle"),
            thresholds=((1.0, "orange"), (5.0, "red")),
        ),
        w=4,
        h=4,
    )
    board.add(
        timeseries(
            "Jobs by state",
            "short",
            Query(f"sum by (state) ({sel('slurm_jobs', part)})", "{{state}}"),
            stack=True,
        )
    )
    board.add(
        timeseries(
            "Pending jobs by reason",
            "short",
            Query(f"sum by (reason) ({sel('slurm_jobs_pending', part)})", "{{reason}}"),
            stack=True,
        )
    )
    board.add(
        timeseries(
            "CPU allocation by partition",
            "percentunit",
            Query(
                "sum by (cluster, partition) ("
                + sel("slurm_partition_cpus", eq("state", "alloc"), part)
                + ") / sum by (cluster, partition) ("
                + sel("slurm_partition_cpus", eq("state", "total"), part)
                + ")",
                "{{cluster}} {{partition}}",
            ),
            minimum=0,
            maximum=1,
        ),
        w=8,
    )
    board.add(
        timeseries(
            "GPU allocation by partition",
            "percentunit",
            Query(
                "sum by (cluster, partition) ("
                + sel("slurm_partition_gpus", eq("state", "alloc"), part)
                + ") / sum by (cluster, partition) ("
                + sel("slurm_partition_gpus", eq("state", "total"), part)
                + ")",
                "{{cluster}} {{partition}}",
            ),
            minimum=0,
            maximum=1,
        ),
        w=8,
    )
    board.add(
        bargauge(
            "Memory allocated by partition",
            "percentunit",
            Query(
                "sum by (cluster, partition) ("
                + sel("slurm_partition_memory_bytes", 'state="alloc"', part)
                + ") / sum by (cluster, partition) ("
                + sel("slurm_partition_memory_bytes", 'state="total"', part)
                + ")",
                "{{cluster}} {{partition}}",
            ),
            maximum=1,
            thresholds=((0.8, "orange"), (0.95, "red")),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Nodes by state and partition",
            "short",
            Query(
                f"sum by (partition, state) ({sel('slurm_nodes', part)})",
                "{{partition}} {{state}}",
            ),
            description="A node in several partitions is counted in each of them.",
            stack=True,
        )
    )
    board.add(
        table(
            "Nodes and reasons",
            "none",
            Query(
                f"max by (cluster, node, state, reason) ({sel('slurm_node_info')})",
                name="nodes",
            ),
            hide=("Time", "Value"),
            description="Every node with its state (base+flags) and the reason Slurm holds.",
        )
    )
    board.add(
        timeseries(
            "Scheduler cycle time",
            "s",
            Query(f"max({sel('slurm_scheduler_cycle_last_seconds')})", "main last"),
            Query(f"max({sel('slurm_scheduler_cycle_mean_seconds')})", "main mean"),
            Query(f"max({sel('slurm_scheduler_cycle_max_seconds')})", "main max"),
            Query(f"max({sel('slurm_scheduler_backfill_cycle_last_seconds')})", "backfill last"),
            Query(f"max({sel('slurm_scheduler_backfill_cycle_mean_seconds')})", "backfill mean"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Scheduler queues",
            "short",
            Query(f"max({sel('slurm_scheduler_queue_length')})", "main queue"),
            Query(f"max({sel('slurm_scheduler_backfill_queue_length')})", "backfill queue"),
            Query(f"max({sel('slurm_scheduler_agent_queue_size')})", "agent queue"),
            Query(f"max({sel('slurm_scheduler_dbd_agent_queue_size')})", "dbd agent queue"),
            Query(f"max({sel('slurm_scheduler_threads')})", "server threads"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Backfilled jobs",
            "ops",
            Query(f"sum({rate('slurm_scheduler_backfilled_jobs_total')})", "backfilled"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "RPCs by type",
            "reqps",
            Query(f"sum by (type) ({rate('slurm_rpc_calls_total')})", "{{type}}"),
        )
    )
    board.add(
        timeseries(
            "RPC mean latency by type",
            "s",
            Query(
                f"sum by (type) ({rate('slurm_rpc_duration_seconds_total')}) / "
                f"sum by (type) ({rate('slurm_rpc_calls_total')})",
                "{{type}}",
            ),
        )
    )
    board.add(
        timeseries(
            "Probe duration",
            "s",
            Query(sel("slurm_probe_duration_seconds"), "{{cluster}} {{op}}"),
        ),
        w=24,
    )
    return dashboard(
        "Slurm cluster",
        "Jobs, partitions, nodes and the controller of each Slurm cluster.",
        ("slurm",),
        board,
        [
            query_variable(
                "partition",
                "Partition",
                "label_values(" + sel("slurm_partition_info") + ", partition)",
            )
        ],
    )


# --------------------------------------------------------------------------------------
# 3. GPU fleet
# --------------------------------------------------------------------------------------


def gpu_fleet() -> Dashboard:
    node = 'instance=~"$instance"'
    whole = 'gpu_instance=""'
    board = Board()
    board.add(stat("GPUs", "short", Query(f"count({sel('gpu_info', node)})", "GPUs")), w=6, h=4)
    board.add(
        stat(
            "Unhealthy GPUs",
            "short",
            Query(
                zero_if_none(
                    sel("gpu_health", node, whole) + " == 0", "", sel("gpu_health", node, whole)
                ),
                "unhealthy",
            ),
            thresholds=BAD_FROM_ONE,
            description="Lost, row-remap failure, or a fatal XID within the health window.",
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Mean utilisation",
            "percentunit",
            Query(f"avg({sel('gpu_utilization_ratio', node)})", "utilisation"),
        ),
        w=6,
        h=4,
    )
    board.add(
        stat("Power draw", "watt", Query(f"sum({sel('gpu_power_watts', node)})", "power")),
        w=6,
        h=4,
    )
    board.add(
        timeseries(
            "GPU utilisation by node",
            "percentunit",
            Query(f"avg by (instance) ({sel('gpu_utilization_ratio', node)})", "{{instance}}"),
            minimum=0,
            maximum=1,
        )
    )
    board.add(
        timeseries(
            "SM and tensor activity",
            "percentunit",
            Query(f"avg({sel('gpu_sm_active_ratio', node, whole)})", "SM active"),
            Query(f"avg({sel('gpu_sm_occupancy_ratio', node, whole)})", "SM occupancy"),
            Query(f"avg({sel('gpu_tensor_active_ratio', node, whole)})", "tensor active"),
            Query(f"avg({sel('gpu_dram_active_ratio', node, whole)})", "DRAM active"),
            description="GPM metrics (Hopper and newer), averaged over the selected GPUs.",
            minimum=0,
            maximum=1,
        )
    )
    board.add(
        timeseries(
            "Memory used by node",
            "percentunit",
            Query(
                f"sum by (instance) ({sel('gpu_memory_used_bytes', node, whole)}) / "
                f"sum by (instance) ({sel('gpu_memory_total_bytes', node, whole)})",
                "{{instance}}",
            ),
            minimum=0,
            maximum=1,
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Power by node",
            "watt",
            Query(f"sum by (instance) ({sel('gpu_power_watts', node)})", "{{instance}}"),
            Query(
                f"sum by (instance) ({sel('gpu_power_limit_watts', node)})", "{{instance}} limit"
            ),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Hottest GPU by node",
            "celsius",
            Query(
                f"max by (instance, sensor) ({sel('gpu_temperature_celsius', node)})",
                "{{instance}} {{sensor}}",
            ),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Throttled time by reason",
            "percentunit",
            Query(
                f"avg by (reason) ({rate('gpu_throttle_seconds_total', node)})",
                "{{reason}}",
            ),
            description="Share of time the clocks were held back (NVML violation counters), "
            "averaged over the selected GPUs.",
            minimum=0,
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Clock event reasons active",
            "short",
            Query(
                f"sum by (reason) ({sel('gpu_clocks_event_reasons', node)})",
                "{{reason}}",
            ),
            description="GPUs whose clocks are held down by each reason right now.",
        ),
        w=8,
    )
    board.add(
        timeseries(
            "XID errors",
            "short",
            Query(
                f"sum by (instance, xid) ({rate('gpu_xid_errors_total', node, fn='increase')})",
                "{{instance}} XID {{xid}}",
            ),
            description="A series appears only after a GPU reported an XID.",
        ),
        w=8,
    )
    board.add(
        timeseries(
            "ECC errors",
            "short",
            Query(
                f"sum by (instance, type) ({rate('gpu_ecc_errors_total', node, fn='increase')})",
                "{{instance}} {{type}}",
            ),
        ),
        w=8,
    )
    board.add(
        bargauge(
            "Remapped rows",
            "short",
            Query(f"sum by (state) ({sel('gpu_remapped_rows', node)})", "{{state}}"),
            description="Correctable and uncorrectable remapped rows; pending and failure "
            "count GPUs.",
            thresholds=BAD_FROM_ONE,
        ),
        w=8,
    )
    board.add(
        timeseries(
            "PCIe replays",
            "cps",
            Query(f"sum by (instance) ({rate('gpu_pcie_replay_total', node)})", "{{instance}}"),
        ),
        w=8,
    )
    board.add(
        table(
            "GPU jobs",
            "none",
            Query(
                owner_join("count by (site, cluster, job_id) (" + sel("gpu_job_info", node) + ")"),
                name="GPUs",
                unit="short",
            ),
            Query(
                owner_join(
                    f"avg by (site, cluster, job_id) ({per_gpu_job('gpu_utilization_ratio')})"
                ),
                name="utilisation",
                unit="percentunit",
            ),
            Query(
                owner_join(
                    "avg by (site, cluster, job_id) ("
                    + per_gpu_job("gpu_tensor_active_ratio", mig=True)
                    + ")"
                ),
                name="tensor active",
                unit="percentunit",
            ),
            Query(
                owner_join(
                    "sum by (site, cluster, job_id) ("
                    + per_gpu_job("gpu_memory_used_bytes", mig=True)
                    + ")"
                ),
                name="memory used",
                unit="bytes",
            ),
            hide=("Time",),
            sort_by="utilisation",
            description="Slurm jobs with processes on the GPUs (gpu_job_info), joined to "
            "slurm_job_info on cluster and job_id for user, account and partition. Memory "
            "of a GPU shared by several jobs is counted for each of them.",
        ),
        w=24,
    )
    board.add(
        timeseries(
            "GPU utilisation by job",
            "percentunit",
            Query(
                owner_join(
                    f"avg by (site, cluster, job_id) ({per_gpu_job('gpu_utilization_ratio')})"
                ),
                "{{job_id}} {{user}}",
            ),
            minimum=0,
            maximum=1,
        )
    )
    board.add(
        timeseries(
            "GPU utilisation by Kubernetes pod",
            "percentunit",
            Query(
                "avg by (site, cluster, namespace, pod, pod_uid) ("
                + sel("gpu_pod_info", node)
                + f" * on({GPU_KEY}) group_left "
                + sel("gpu_utilization_ratio", node)
                + ")",
                "{{namespace}}/{{pod}} {{pod_uid}}",
            ),
            minimum=0,
            maximum=1,
        )
    )
    return dashboard(
        "GPU fleet",
        "NVML metrics of every GPU: utilisation, GPM activity, memory, power, throttling, "
        "XIDs, ECC and row remapping, with per-job and per-pod views.",
        ("gpu",),
        board,
        [query_variable("instance", "Node", "label_values(" + sel("gpu_info") + ", instance)")],
    )


# --------------------------------------------------------------------------------------
# 4. Slingshot network health
# --------------------------------------------------------------------------------------


def slingshot_network() -> Dashboard:
    node = 'instance=~"$instance"'
    board = Board()
    board.add(
        stat("NICs", "short", Query(f"count({sel('slingshot_info', node)})", "NICs")), w=6, h=4
    )
    board.add(
        stat(
            "Links down",
            "short",
            Query(
                zero_if_none(
                    sel("slingshot_link_up", node) + " == 0", "", sel("slingshot_link_up", node)
                ),
                "down",
            ),
            thresholds=BAD_FROM_ONE,
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Links unhealthy",
            "short",
            Query(
                zero_if_none(
                    sel("slingshot_link_healthy", node) + " == 0",
                    "",
                    sel("slingshot_link_healthy", node),
                ),
                "unhealthy",
            ),
            thresholds=BAD_FROM_ONE,
            description="cxi_healthcheck rule: link down, or too many restarts in 1 h / 10 h.",
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Uncorrected FEC codewords",
            "cps",
            Query(
                f"sum({rate('slingshot_fec_codewords_total', node, eq('type', 'uncorrected'))})",
                "uncorrected",
            ),
            thresholds=((0.001, "red"),),
        ),
        w=6,
        h=4,
    )
    board.add(
        timeseries(
            "Link restarts (flaps)",
            "short",
            Query(
                "topk(10, sum by (instance, device, window) ("
                + sel("slingshot_link_restarts_recent", node)
                + "))",
                "{{instance}} {{device}} {{window}}",
            ),
            description="Restarts in the last 1 h and 10 h windows (link_restarts/time_*).",
        )
    )
    board.add(
        timeseries(
            "Retransmission timeouts",
            "cps",
            Query(f"sum by (type) ({rate('slingshot_timeouts_total', node)})", "{{type}}"),
            description="SPT, SCT and TCT timeouts: packets the NIC had to retransmit.",
        )
    )
    board.add(
        timeseries(
            "FEC codewords",
            "cps",
            Query(
                "sum by (type) ("
                + rate("slingshot_fec_codewords_total", node, 'type=~"corrected|uncorrected"')
                + ")",
                "{{type}}",
            ),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Codeword error ratio (BER proxy)",
            "sci",
            Query(
                "sum by (instance, device) ("
                + rate("slingshot_fec_codewords_total", node, 'type="corrected"')
                + ") / sum by (instance, device) ("
                + rate("slingshot_fec_codewords_total", node)
                + ")",
                "{{instance}} {{device}} corrected",
            ),
            Query(
                "sum by (instance, device) ("
                + rate("slingshot_fec_codewords_total", node, 'type="uncorrected"')
                + ") / sum by (instance, device) ("
                + rate("slingshot_fec_codewords_total", node)
                + ")",
                "{{instance}} {{device}} uncorrected",
            ),
            description="Corrected (pre-FEC) and uncorrected (post-FEC) codewords over all "
            "codewords: a proxy for the bit error rate.",
        ),
        w=8,
    )
    board.add(
        timeseries(
            "LLR replays",
            "cps",
            Query(
                f"sum by (direction) ({rate('slingshot_llr_replays_total', node)})",
                "{{direction}}",
            ),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Pause frames",
            "cps",
            Query(
                f"sum by (direction, class) ({rate('slingshot_pause_total', node)})",
                "{{direction}} class {{class}}",
            ),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Discards",
            "cps",
            Query(f"sum by (class) ({rate('slingshot_discards_total', node)})", "class {{class}}"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Bad frames received",
            "cps",
            Query(f"sum by (type) ({rate('slingshot_rx_bad_frames_total', node)})", "{{type}}"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "NACKs",
            "cps",
            Query(f"sum by (reason) ({rate('slingshot_nacks_total', node)})", "{{reason}}"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Throughput",
            "Bps",
            Query(f"sum by (direction) ({rate('slingshot_octets_total', node)})", "{{direction}}"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "NIC PCIe errors",
            "cps",
            Query(f"sum by (type) ({rate('slingshot_pcie_errors_total', node)})", "{{type}}"),
        ),
        w=8,
    )
    board.add(
        table(
            "NICs and links",
            "none",
            Query(
                "max by (site, cluster, instance, device, interface, nid, cassini_version, "
                "firmware) (" + sel("slingshot_info", node) + ")",
                name="info",
            ),
            Query(
                f"max by (site, cluster, instance, device) ({sel('slingshot_link_up', node)})",
                name="link up",
                mappings=(UP_DOWN,),
            ),
            Query(
                "max by (site, cluster, instance, device) ("
                + sel("slingshot_link_healthy", node)
                + ")",
                name="healthy",
                mappings=(HEALTHY,),
            ),
            Query(
                "max by (site, cluster, instance, device) ("
                + sel("slingshot_link_speed_bits_per_second", node)
                + ")",
                name="speed",
                unit="bps",
            ),
            hide=("Time", "Value #A"),
        ),
        w=24,
    )
    return dashboard(
        "Slingshot network health",
        "HPE Slingshot (Cassini) NICs: link state and flaps, retransmissions, FEC, "
        "LLR replays, pause, discards and throughput.",
        ("slingshot", "network"),
        board,
        [
            query_variable(
                "instance", "Node", "label_values(" + sel("slingshot_info") + ", instance)"
            )
        ],
    )


# --------------------------------------------------------------------------------------
# 5. Lustre storage
# --------------------------------------------------------------------------------------


def lustre_storage() -> Dashboard:
    fs = 'fs=~"$fs"'
    fill = ost_fill()
    board = Board()
    board.add(
        stat(
            "OST capacity",
            "bytes",
            Query(f"sum({ost_max('lustre_target_capacity_bytes')})", "capacity"),
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Fullest OST",
            "percentunit",
            Query(f"max({fill})", "fill"),
            thresholds=((0.85, "orange"), (0.9, "red")),
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "OST fill spread",
            "percentunit",
            Query(f"max(max by (fs) ({fill}) - min by (fs) ({fill}))", "max - min"),
            thresholds=((0.2, "orange"),),
            description="Fullest minus emptiest OST of a file system: imbalance.",
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Metadata operations",
            "ops",
            Query(f"sum({rate('lustre_operations_total', fs, eq('component', 'mdt'))})", "ops"),
        ),
        w=6,
        h=4,
    )
    board.add(
        bargauge(
            "OST fill",
            "percentunit",
            Query(fill, "{{target}}"),
            maximum=1,
            thresholds=((0.85, "orange"), (0.9, "red")),
        ),
        h=10,
    )
    board.add(
        timeseries(
            "OST fill spread by file system",
            "percentunit",
            Query(
                f"max by (site, cluster, fs) ({fill}) - min by (site, cluster, fs) ({fill})",
                "{{fs}}",
            ),
            minimum=0,
        ),
        h=10,
    )
    board.add(
        timeseries(
            "MDT inodes used",
            "percentunit",
            Query(
                "1 - max by (site, cluster, fs, target) ("
                + sel("lustre_target_files", fs, rx("component", "mdt|mdc"), eq("state", "free"))
                + ") / max by (site, cluster, fs, target) ("
                + sel("lustre_target_files", fs, rx("component", "mdt|mdc"), eq("state", "total"))
                + ")",
                "{{target}}",
            ),
            minimum=0,
            maximum=1,
        )
    )
    board.add(
        timeseries(
            "Metadata operations by type",
            "ops",
            Query(
                "sum by (operation) ("
                + rate("lustre_operations_total", fs, eq("component", "mdt"))
                + ")",
                "{{operation}}",
            ),
        )
    )
    board.add(
        timeseries(
            "Metadata operation latency (mean)",
            "s",
            Query(
                "sum by (operation) ("
                + rate("lustre_operation_latency_seconds_total", fs, 'component="mdt"')
                + ") / sum by (operation) ("
                + rate("lustre_operations_total", fs, 'component="mdt"')
                + ")",
                "{{operation}}",
            ),
        )
    )
    board.add(
        timeseries(
            "OST operations by type",
            "ops",
            Query(
                "sum by (operation) ("
                + rate("lustre_operations_total", fs, eq("component", "ost"))
                + ")",
                "{{operation}}",
            ),
        )
    )
    board.add(
        timeseries(
            "Top jobs by read",
            "Bps",
            Query(
                "topk(10, sum by (site, cluster, fs, job_id) ("
                + rate("lustre_job_read_bytes_total", fs)
                + "))",
                "{{fs}} {{job_id}}",
            ),
            description="Needs --lustre.job-stats on the servers.",
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Top jobs by write",
            "Bps",
            Query(
                "topk(10, sum by (site, cluster, fs, job_id) ("
                + rate("lustre_job_write_bytes_total", fs)
                + "))",
                "{{fs}} {{job_id}}",
            ),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Top jobs by metadata operations",
            "ops",
            Query(
                "topk(10, sum by (site, cluster, fs, job_id) ("
                + rate("lustre_job_operations_total", fs, 'target=~".*-MDT[0-9a-fA-F]+"')
                + "))",
                "{{fs}} {{job_id}}",
            ),
        ),
        w=8,
    )
    board.add(
        table(
            "Job IO by Slurm user",
            "Bps",
            Query(
                owner_join(
                    "sum by (site, cluster, job_id) ("
                    + rate("lustre_job_read_bytes_total", fs)
                    + ")"
                ),
                name="read",
            ),
            Query(
                owner_join(
                    "sum by (site, cluster, job_id) ("
                    + rate("lustre_job_write_bytes_total", fs)
                    + ")"
                ),
                name="write",
            ),
            sort_by="write",
            description="Lustre job_stats (job_id from jobid_var=SLURM_JOB_ID) joined to "
            "slurm_job_info on cluster and job_id.",
        ),
        w=16,
    )
    board.add(
        stat(
            "Jobs left out of job stats",
            "short",
            Query(f"sum({sel('lustre_job_stats_truncated')})", "jobs dropped"),
            thresholds=BAD_FROM_ONE,
            description="Jobs dropped from the per-job series by --lustre.job-stats-limit "
            "(lowest IO first).",
        ),
        w=8,
    )
    return dashboard(
        "Lustre storage",
        "Lustre OST fill and imbalance, metadata operations and latency, per-job IO.",
        ("lustre", "storage"),
        board,
        [
            query_variable(
                "fs", "File system", "label_values(" + sel("lustre_target_capacity_bytes") + ", fs)"
            )
        ],
    )


# --------------------------------------------------------------------------------------
# 6. Disaster recovery
# --------------------------------------------------------------------------------------


def disaster_recovery() -> Dashboard:
    board = Board()
    board.add(
        stat(
            "Site health",
            "none",
            Query(f"min by (site) ({sel('gotthard_dr_site_healthy')})", "{{site}}"),
            mappings=(HEALTHY,),
            description="The placement controller's verdict on each site.",
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Oldest successful backup",
            "s",
            Query(
                f"max(time() - {sel('gotthard_dr_backup_last_success_timestamp_seconds')})",
                "age",
            ),
            thresholds=((86400.0, "orange"), (172800.0, "red")),
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Drills passing",
            "percentunit",
            Query(
                f"sum({sel('gotthard_dr_drill_last_success')}) / "
                f"count({sel('gotthard_dr_drill_last_success')})",
                "passing",
            ),
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Worst drill RTO",
            "s",
            Query(f"max({sel('gotthard_dr_drill_rto_seconds')})", "RTO"),
        ),
        w=6,
        h=4,
    )
    board.add(
        timeseries(
            "Backup age by schedule",
            "s",
            Query(
                f"time() - {sel('gotthard_dr_backup_last_success_timestamp_seconds')}",
                "{{site}} {{schedule}}",
            ),
        )
    )
    board.add(
        timeseries(
            "Backup duration",
            "s",
            Query(sel("gotthard_dr_backup_duration_seconds"), "{{site}} {{schedule}}"),
        )
    )
    board.add(
        timeseries(
            "Backups by phase",
            "short",
            Query(
                f"sum by (site, phase) ({rate('gotthard_dr_backups_total', fn='increase')})",
                "{{site}} {{phase}}",
            ),
            stack=True,
        )
    )
    board.add(
        timeseries(
            "RPO by namespace",
            "s",
            Query(sel("gotthard_dr_rpo_seconds"), "{{site}} {{namespace}}"),
            description="Now minus the time of the namespace's latest usable backup.",
        )
    )
    board.add(
        table(
            "Drills",
            "s",
            Query(
                f"max by (site, namespace) ({sel('gotthard_dr_drill_last_success')})",
                name="last drill",
                unit="none",
                mappings=(PASS_FAIL,),
            ),
            Query(
                f"max by (site, namespace) ({sel('gotthard_dr_drill_rto_seconds')})",
                name="RTO",
            ),
            Query(
                f"max by (site, namespace) ({sel('gotthard_dr_drill_rpo_seconds')})",
                name="RPO",
            ),
            Query(
                "time() - max by (site, namespace) ("
                + sel("gotthard_dr_drill_last_timestamp_seconds")
                + ")",
                name="since last drill",
            ),
            sort_by="RTO",
        ),
        w=24,
    )
    board.add(
        timeseries(
            "Drill RTO",
            "s",
            Query(sel("gotthard_dr_drill_rto_seconds"), "{{site}} {{namespace}}"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Drill RPO",
            "s",
            Query(sel("gotthard_dr_drill_rpo_seconds"), "{{site}} {{namespace}}"),
        ),
        w=8,
    )
    board.add(
        timeseries(
            "Site health over time",
            "none",
            Query(f"min by (site) ({sel('gotthard_dr_site_healthy')})", "{{site}}"),
        ),
        w=8,
    )
    board.add(
        table(
            "Placement",
            "none",
            Query(
                f"max by (service, site) ({sel('gotthard_dr_placement')})",
                name="placed",
            ),
            description="Where each service runs now (Karmada PropagationPolicy).",
            sort_by="service",
        ),
        w=24,
    )
    return dashboard(
        "DR",
        "Velero backups, DR drills with measured RTO and RPO, and Zurich/Lugano placement.",
        ("dr",),
        board,
    )


# --------------------------------------------------------------------------------------
# 7. Security compliance
# --------------------------------------------------------------------------------------


def security_compliance() -> Dashboard:
    board = Board()
    board.add(
        stat(
            "kube-bench failed checks",
            "short",
            Query(f"sum({sel('gotthard_kube_bench_checks', rx('status', '(?i)fail'))})", "failed"),
            thresholds=BAD_FROM_ONE,
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "kube-bench passing",
            "percentunit",
            Query(
                f"sum({sel('gotthard_kube_bench_checks', rx('status', '(?i)pass'))}) / "
                f"sum({sel('gotthard_kube_bench_checks', rx('status', '(?i)pass|fail'))})",
                "passing",
            ),
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "kube-bench warnings",
            "short",
            Query(
                f"sum({sel('gotthard_kube_bench_checks', rx('status', '(?i)warn'))})", "warnings"
            ),
        ),
        w=6,
        h=4,
    )
    board.add(
        stat(
            "Policy violations",
            "short",
            Query(f"sum({sel('gotthard_policy_violations')})", "violations"),
            thresholds=BAD_FROM_ONE,
        ),
        w=6,
        h=4,
    )
    board.add(
        bargauge(
            "kube-bench results by node type",
            "short",
            Query(
                "sum by (node_type, status) (" + sel("gotthard_kube_bench_checks") + ")",
                "{{node_type}} {{status}}",
            ),
        )
    )
    board.add(
        timeseries(
            "kube-bench checks by status",
            "short",
            Query(
                f"sum by (status) ({sel('gotthard_kube_bench_checks')})",
                "{{status}}",
            ),
        )
    )
    board.add(
        table(
            "Failed kube-bench checks",
            "none",
            Query(
                "max by (site, cluster, node_type, id) ("
                + sel("gotthard_kube_bench_check_failed")
                + ") > 0",
                name="failed",
            ),
            sort_by="id",
            description="CIS checks that failed and are not waived.",
        )
    )
    board.add(
        table(
            "Policy violations by rule",
            "short",
            Query(
                "sum by (site, cluster, policy, rule) (" + sel("gotthard_policy_violations") + ")",
                name="violations",
            ),
            sort_by="violations",
        )
    )
    board.add(
        timeseries(
            "Policy violations over time",
            "short",
            Query(
                f"sum by (policy) ({sel('gotthard_policy_violations')})",
                "{{policy}}",
            ),
        ),
        w=24,
    )
    return dashboard(
        "Security compliance",
        "kube-bench CIS results (with waivers) and admission-policy violations.",
        ("security",),
        board,
    )


# --------------------------------------------------------------------------------------
# 8. Gotthard's own exporters
# --------------------------------------------------------------------------------------


def exporter_health() -> Dashboard:
    board = Board()
    board.add(
        stat(
            "Scrape targets down",
            "short",
            Query(zero_if_none(sel("up") + " == 0", "", sel("up")), "down"),
            thresholds=BAD_FROM_ONE,
        ),
        w=8,
        h=4,
    )
    board.add(
        stat(
            "Collectors down",
            "short",
            Query(
                zero_if_none(
                    sel("gotthard_collector_up") + " == 0", "", sel("gotthard_collector_up")
                ),
                "down",
            ),
            thresholds=BAD_FROM_ONE,
        ),
        w=8,
        h=4,
    )
    board.add(
        stat(
            "Collectors serving stale data",
            "short",
            Query(f"sum({sel('gotthard_collector_stale')})", "stale"),
            thresholds=BAD_FROM_ONE,
        ),
        w=8,
        h=4,
    )
    board.add(
        table(
            "Collectors",
            "none",
            Query(
                f"max by (site, cluster, instance, collector) ({sel('gotthard_collector_up')})",
                name="up",
                mappings=(UP_DOWN,),
            ),
            Query(
                "max by (site, cluster, instance, collector) ("
                + sel("gotthard_collector_stale")
                + ")",
                name="stale",
            ),
            Query(
                "time() - max by (site, cluster, instance, collector) ("
                + sel("gotthard_collector_last_success_timestamp_seconds")
                + ")",
                name="since last good poll",
                unit="s",
            ),
            Query(
                "max by (site, cluster, instance, collector) ("
                + sel("gotthard_collector_duration_seconds")
                + ")",
                name="poll duration",
                unit="s",
            ),
        ),
        w=24,
    )
    board.add(
        timeseries(
            "Poll duration",
            "s",
            Query(sel("gotthard_collector_duration_seconds"), "{{instance}} {{collector}}"),
        )
    )
    board.add(
        timeseries(
            "Collector errors",
            "cps",
            Query(
                f"sum by (instance, collector) ({rate('gotthard_collector_errors_total')})",
                "{{instance}} {{collector}}",
            ),
        )
    )
    board.add(
        timeseries(
            "Scrape duration",
            "s",
            Query(sel("scrape_duration_seconds"), "{{job}} {{instance}}"),
        )
    )
    board.add(
        timeseries(
            "Samples per scrape",
            "short",
            Query(sel("scrape_samples_scraped"), "{{job}} {{instance}}"),
        )
    )
    board.add(
        table(
            "Exporter versions",
            "none",
            Query(
                "max by (site, cluster, instance, version, python_version) ("
                + sel("gotthard_build_info")
                + ")",
                name="build",
            ),
            hide=("Time", "Value"),
        ),
        w=24,
    )
    return dashboard(
        "Exporters",
        "Gotthard's own exporters: scrape health, collector state, poll duration, errors.",
        ("meta",),
        board,
    )


#: Every dashboard, in the order they are listed in docs/dashboards.md.
BUILDERS: tuple[Callable[[], Dashboard], ...] = (
    site_overview,
    slurm_cluster,
    gpu_fleet,
    slingshot_network,
    lustre_storage,
    disaster_recovery,
    security_compliance,
    exporter_health,
)

#: Stable uids, for links from alerts (``dashboard_url``) and runbooks.
DASHBOARD_UIDS: dict[str, str] = {
    "overview": uid_for("Site overview"),
    "slurm": uid_for("Slurm cluster"),
    "gpu": uid_for("GPU fleet"),
    "slingshot": uid_for("Slingshot network health"),
    "lustre": uid_for("Lustre storage"),
    "dr": uid_for("DR"),
    "security": uid_for("Security compliance"),
    "exporters": uid_for("Exporters"),
}


# --------------------------------------------------------------------------------------
# schemaVersion 12 -> current Grafana JSON
# --------------------------------------------------------------------------------------

_DASHBOARD_KEYS = (
    "annotations",
    "description",
    "editable",
    "graphTooltip",
    "panels",
    "refresh",
    "tags",
    "templating",
    "time",
    "timezone",
    "title",
    "uid",
)
_PANEL_KEYS = (
    "datasource",
    "description",
    "gridPos",
    "id",
    "interval",
    "maxPerRow",
    "repeat",
    "repeatDirection",
    "targets",
    "timeFrom",
    "timeShift",
    "title",
    "transformations",
    "transparent",
    "type",
)
_FIELD_DEFAULT_KEYS = (
    "color",
    "custom",
    "decimals",
    "displayName",
    "mappings",
    "max",
    "min",
    "noValue",
    "thresholds",
    "unit",
)
_VARIABLE_KEYS = (
    "allValue",
    "datasource",
    "description",
    "hide",
    "includeAll",
    "label",
    "multi",
    "name",
    "options",
    "query",
    "refresh",
    "regex",
    "skipUrlSync",
    "sort",
    "type",
)


def _prune(value: Any) -> Any:
    """Drop ``None`` values from dicts (threshold steps keep their ``null`` base value)."""
    if isinstance(value, dict):
        return {
            key: item if key == "steps" else _prune(item)
            for key, item in value.items()
            if item is not None
        }
    if isinstance(value, list):
        return [_prune(item) for item in value]
    return value


def _modern_target(target: dict[str, Any]) -> dict[str, Any]:
    modern = {
        "datasource": dict(DATASOURCE),
        "editorMode": "code",
        "expr": target["expr"],
        "format": target.get("format") or TIME_SERIES_TARGET_FORMAT,
        "instant": bool(target.get("instant")),
        "legendFormat": target.get("legendFormat") or "",
        "range": not target.get("instant"),
        "refId": target["refId"],
    }
    if target.get("legendFormat") is None or modern["legendFormat"] == "":
        modern["legendFormat"] = "__auto"
    if target.get("interval"):
        modern["interval"] = target["interval"]
    return modern


def _modern_panel(panel: dict[str, Any]) -> dict[str, Any]:
    kind = panel["type"]
    modern = {key: panel[key] for key in _PANEL_KEYS if panel.get(key) not in (None, "", [])}
    if "repeat" not in modern:
        for key in ("repeatDirection", "maxPerRow"):
            modern.pop(key, None)
    modern["datasource"] = dict(DATASOURCE)
    modern["targets"] = [_modern_target(target) for target in panel.get("targets", [])]
    field_config = panel.get("fieldConfig") or {}
    defaults = dict(field_config.get("defaults") or {})
    options = dict(panel.get("options") or {})
    if kind == "bargauge":
        legacy = options.pop("fieldOptions", {})
        legacy_defaults = legacy.get("defaults", {})
        defaults.update(
            {
                "unit": legacy_defaults.get("unit"),
                "min": legacy_defaults.get("min"),
                "max": legacy_defaults.get("max"),
                "decimals": legacy_defaults.get("decimals"),
                "thresholds": {"mode": "absolute", "steps": legacy.get("thresholds", [])},
                "color": {"mode": "thresholds"},
            }
        )
        options = {
            "displayMode": options.get("displayMode", "gradient"),
            "orientation": options.get("orientation", "horizontal"),
            "reduceOptions": {
                "calcs": legacy.get("calcs", ["lastNotNull"]),
                "fields": "",
                "values": False,
            },
            "showUnfilled": True,
            "valueMode": "color",
        }
    elif kind == "table":
        custom = dict(defaults.get("custom") or {})
        custom.pop("displayMode", None)
        custom["cellOptions"] = {"type": "auto"}
        defaults["custom"] = custom
        options = {
            "cellHeight": "sm",
            "showHeader": options.get("showHeader", True),
            "sortBy": options.get("sortBy", []),
        }
    elif kind == "stat":
        defaults.pop("custom", None)
        options["reduceOptions"] = dict(options.get("reduceOptions") or {})
        options["reduceOptions"]["fields"] = ""
    defaults = {key: defaults[key] for key in _FIELD_DEFAULT_KEYS if key in defaults}
    if not isinstance(defaults.get("thresholds"), dict) or not isinstance(
        defaults["thresholds"].get("steps"), list
    ):
        defaults["thresholds"] = {"mode": "absolute", "steps": _steps(())}
    modern["fieldConfig"] = {
        "defaults": defaults,
        "overrides": list(field_config.get("overrides") or []),
    }
    modern["options"] = options
    return _prune(modern)


def _modern_variable(variable: dict[str, Any]) -> dict[str, Any]:
    modern = {key: variable[key] for key in _VARIABLE_KEYS if variable.get(key) is not None}
    modern.setdefault("hide", 0)
    modern.setdefault("regex", "")
    modern["skipUrlSync"] = False
    if variable["type"] == "datasource":
        modern["current"] = {}
        modern.pop("datasource", None)
        modern.pop("sort", None)
    else:
        modern["datasource"] = dict(DATASOURCE)
        if modern.get("includeAll"):
            modern["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
        else:
            modern["current"] = {}
    modern["options"] = []
    return modern


def modernise(legacy: dict[str, Any]) -> dict[str, Any]:
    """Rewrite grafanalib's schemaVersion-12 dashboard into current Grafana JSON."""
    if legacy.get("rows"):
        raise ValueError("dashboards must use panels with gridPos, not legacy rows")
    modern = {key: legacy[key] for key in _DASHBOARD_KEYS if legacy.get(key) is not None}
    modern["annotations"] = {"list": []}
    modern["fiscalYearStartMonth"] = 0
    modern["links"] = [
        {
            "asDropdown": True,
            "icon": "external link",
            "includeVars": True,
            "keepTime": True,
            "tags": [TAG],
            "targetBlank": False,
            "title": "Gotthard",
            "tooltip": "",
            "type": "dashboards",
        }
    ]
    modern["liveNow"] = False
    modern["panels"] = [_modern_panel(panel) for panel in legacy.get("panels", [])]
    modern["schemaVersion"] = SCHEMA_VERSION
    modern["templating"] = {
        "list": [_modern_variable(v) for v in legacy.get("templating", {}).get("list", [])]
    }
    modern["time"] = {"from": legacy["time"]["from"], "to": legacy["time"]["to"]}
    modern["version"] = 1
    modern["weekStart"] = ""
    return modern


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
