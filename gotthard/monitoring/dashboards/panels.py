"""Building blocks of the dashboards: PromQL selectors, panels, layout and variables.

Every dashboard module in :mod:`gotthard.monitoring.dashboards.boards` is written with
these helpers, so that the conventions checked by :mod:`~gotthard.monitoring.dashboards.lint`
hold by construction:

* every selector filters on ``site=~"$site", cluster=~"$cluster"``
  (:func:`gotthard.monitoring.shared.sel`; both are target labels added by Prometheus'
  scrape configuration, never by an exporter);
* ``rate``/``irate``/``increase`` use ``[$__rate_interval]``
  (:func:`gotthard.monitoring.shared.rate`);
* every panel and target uses the ``${datasource}`` variable and has a unit;
* uids are ``gotthard-<slug of the name>``, at most 40 characters
  (:data:`gotthard.monitoring.shared.DASHBOARD_UIDS`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import attr
from grafanalib.core import (
    TABLE_TARGET_FORMAT,
    TIME_SERIES_TARGET_FORMAT,
    BarGauge,
    Dashboard,
    GridPos,
    Repeat,
    RowPanel,
    Stat,
    Table,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

from gotthard.monitoring.rule_model import DEFAULT_SLOW_RULE_INTERVAL
from gotthard.monitoring.shared import DASHBOARD_NAMES, DASHBOARD_UIDS, TITLE_PREFIX, sel

DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
TAG = "gotthard"
REF_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


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


def threshold_steps(thresholds: Iterable[tuple[float, str]]) -> list[dict[str, Any]]:
    """Grafana's colour steps: green below the first threshold, lowest value first."""
    return [{"color": "green", "value": None}] + [
        {"color": color, "value": value} for value, color in sorted(thresholds)
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


def _common(
    title: str, description: str, queries: Sequence[Query], *, instant: bool, table: bool
) -> dict[str, Any]:
    """The arguments every panel takes alike: title, description, datasource, targets."""
    return {
        "title": title,
        "description": description or None,
        "dataSource": DATASOURCE,
        "targets": _targets(queries, instant=instant, table=table),
    }


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
                    "value": {"mode": "absolute", "steps": threshold_steps(query.thresholds)},
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


#: A recorded series' name (``level:metric:operations``) and a raw metric's.
_RECORD = re.compile(r"\b[a-z][a-z0-9_]*:[a-z0-9_]+:[a-z0-9_]+\b")
_METRIC = re.compile(r"\bgotthard_[a-z0-9_]+\b")


@functools.cache
def _slow_records() -> frozenset[str]:
    from gotthard.monitoring.rules import RECORDING_RULES  # the rules import no panel

    return frozenset(rule.record for rule in RECORDING_RULES if rule.cadence == "slow")


def record_interval(queries: Sequence[Query]) -> str | None:
    """The panel's minimum interval (Grafana's "Min interval"): the default slow rule
    interval when its queries read slow records only, which change only that often (a
    finer step repeats each value and costs a day's range query more steps); none
    otherwise."""
    exprs = [query.expr for query in queries]
    records = {name for expr in exprs for name in _RECORD.findall(expr)}
    raw = any(_METRIC.search(_RECORD.sub("", expr)) for expr in exprs)
    if records and not raw and records <= _slow_records():
        return DEFAULT_SLOW_RULE_INTERVAL
    return None


def timeseries(
    title: str,
    unit: str,
    *queries: Query,
    description: str = "",
    stack: bool = False,
    minimum: int | None = None,
    maximum: int | None = None,
    lines: tuple[tuple[float, str], ...] = (),
) -> TimeSeries:
    """*lines* are thresholds drawn across the graph (an alert's, at its current value)."""
    return TimeSeries(
        **_common(title, description, queries, instant=False, table=False),
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
        thresholds=threshold_steps(lines),
        thresholdsStyleMode="line" if lines else "off",
        interval=record_interval(queries),
    )


def gauge_timeseries(
    title: str,
    unit: str,
    metric: str,
    legend: str,
    *,
    description: str = "",
    lines: tuple[tuple[float, str], ...] = (),
) -> TimeSeries:
    """Every series of one gauge over time, as it is (no aggregation)."""
    query = Query(sel(metric), legend)
    return timeseries(title, unit, query, description=description, lines=lines)


def ratio_timeseries(
    title: str, *queries: Query, description: str = "", lines: tuple[tuple[float, str], ...] = ()
) -> TimeSeries:
    """A time series of ratios between 0 and 1, shown as percentages on a fixed axis."""
    return timeseries(
        title, "percentunit", *queries, description=description, minimum=0, maximum=1, lines=lines
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
        **_common(title, description, queries, instant=True, table=False),
        format=unit,
        graphMode="none",
        colorMode="value",
        reduceCalc="lastNotNull",
        textMode="value_and_name" if len(queries) > 1 else "auto",
        noValue="no data",
        mappings=list(mappings),
        overrides=_overrides(queries, table=False),
        thresholds=threshold_steps(thresholds),
        repeat=Repeat(direction="h", variable=repeat, maxPerRow=2) if repeat else Repeat(),
    )


def problem_stat(title: str, expr: str, legend: str, *, description: str = "") -> Stat:
    """A count of things that are wrong: green at 0, red from 1."""
    return stat(
        title, "short", Query(expr, legend), thresholds=BAD_FROM_ONE, description=description
    )


def label_table(
    title: str, expr: str, name: str, *, description: str = "", sort_by: str = ""
) -> Table:
    """A table with one row per label set of the instant query *expr* (no unit): who is
    placed where, which alerts fire, which checks failed."""
    return table(title, "none", Query(expr, name=name), description=description, sort_by=sort_by)


def job_link(column: str = "job_id") -> dict[str, Any]:
    """A table override: the *column* of Slurm job ids links to the Job dashboard, with
    the row's site and cluster and the current time range."""
    url = (
        f"/d/{DASHBOARD_UIDS['job']}?var-site=${{__data.fields.site}}"
        "&var-cluster=${__data.fields.cluster}&var-job_id=${__value.raw}&${__url_time_range}"
    )
    return {
        "matcher": {"id": "byName", "options": column},
        "properties": [{"id": "links", "value": [{"title": "Job efficiency", "url": url}]}],
    }


def table(
    title: str,
    unit: str,
    *queries: Query,
    description: str = "",
    hide: Sequence[str] = ("Time",),
    sort_by: str = "",
    links: Sequence[dict[str, Any]] = (),
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
        **_common(title, description, queries, instant=True, table=True),
        unit=unit,
        filterable=True,
        overrides=[*_overrides(queries, table=True), *links],
        transformations=transformations,
        thresholds=threshold_steps(()),
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
        **_common(title, description, queries, instant=True, table=False),
        format=unit,
        min=minimum,
        max=maximum,
        calc="lastNotNull",
        displayMode="gradient",
        orientation="horizontal",
        thresholds=threshold_steps(thresholds),
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

    def row(self, *panels: Any, h: int = 8) -> None:
        """Place *panels* side by side, sharing the full width equally."""
        for panel in panels:
            self.add(panel, w=24 // len(panels), h=h)

    def section(self, title: str) -> None:
        """A row header (Grafana's row panel, always open) over the panels placed next."""
        self.newline()
        self.panels.append(RowPanel(title=title, gridPos=GridPos(h=1, w=24, x=0, y=self._y)))
        self._y += 1

    def stats(self, *panels: Any) -> None:
        """A row of small stat panels (4 high), as at the top of most dashboards."""
        self.row(*panels, h=4)

    def newline(self) -> None:
        if self._x:
            self._y += self._row_height
            self._x = 0
            self._row_height = 0


# --------------------------------------------------------------------------------------
# Variables and dashboards
# --------------------------------------------------------------------------------------


def query_variable(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = True,
    include_all: bool = True,
    all_value: str | None = None,
    regex: str | None = None,
    hidden: bool = False,
) -> Template:
    """*all_value* is what "All" stands for in the queries; without it Grafana writes the
    alternation of every value (``(a|b|...)``). *regex* (``/.../``) keeps the part of
    each value its first group matches (Grafana's variable regex); a *hidden* variable
    is not shown in the dashboard's bar."""
    return Template(
        name=name,
        label=label,
        query=query,
        dataSource=DATASOURCE,
        multi=multi,
        includeAll=include_all,
        allValue=all_value,
        regex=regex,
        hide=2 if hidden else 0,
        refresh=2,  # on time range change
        sort=1,
        default="$__all" if include_all else None,
    )


def label_variable(
    name: str, label: str, metric: str, *, all_value: str | None = None, include_all: bool = True
) -> Template:
    """A variable over the values of label *name* of *metric*, filtered on site and cluster."""
    return query_variable(
        name,
        label,
        f"label_values({sel(metric)}, {name})",
        all_value=all_value if include_all else None,
        include_all=include_all,
    )


#: The matcher of the nodes chosen in a :func:`node_variable`.
NODE = 'instance=~"$instance"'
#: What "All" nodes stands for: any instance. A site has thousands of nodes; the
#: alternation of all of them would be a regex of tens of kilobytes in every query.
ALL_NODES = ".*"


def node_variable(metric: str, *, include_all: bool = True) -> Template:
    """The ``instance`` variable ("Node") of a per-node dashboard: the nodes that report
    *metric*; :data:`NODE` selects them, "All" as :data:`ALL_NODES` (every series of the
    metric a panel reads, within the site and cluster chosen). Without *include_all* the
    choice is one node or several, and the dashboard opens on the first node: for panels
    whose cost follows the nodes they draw (every GPU of a node at every step)."""
    return label_variable("instance", "Node", metric, all_value=ALL_NODES, include_all=include_all)


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
    key: str,
    description: str,
    tags: Sequence[str],
    board: Board,
    variables: Sequence[Template] = (),
) -> Dashboard:
    """The dashboard *key* of :data:`~gotthard.monitoring.shared.DASHBOARD_NAMES`, titled
    ``Gotthard / <name>``, with its uid from
    :data:`~gotthard.monitoring.shared.DASHBOARD_UIDS`."""
    name = DASHBOARD_NAMES[key]
    return Dashboard(
        title=TITLE_PREFIX + name,
        uid=DASHBOARD_UIDS[key],
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
